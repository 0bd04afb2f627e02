"""The database's clock: the one time every replica agrees on, for leases and staleness.

A lease written by one replica is judged by another, and a session's heartbeats are
written by its owner and swept by anyone. Each replica's own clock drifts (seconds of
skew are common), so these judgements read the time from the database, inside the
transaction that acts on it:

    PostgreSQL   `now()`: the server's time at the start of the transaction
    SQLite       `strftime('%Y-%m-%d %H:%M:%f', 'now')`: the host's, as SQLite reads it

Under a simulated clock (tests, the demo, the benchmarks) the simulated clock is the
world's time, so it stands for the database's as well (`database_clock`); a test that
skews one replica's clock passes the world's clock as `SharedClock` explicitly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock, SimClock

__all__ = ["DatabaseClock", "ServerClock", "SharedClock", "database_clock"]


class DatabaseClock(Protocol):
    """The time that judges leases and staleness, read inside the acting transaction."""

    async def now(self, session: AsyncSession) -> datetime: ...


class ServerClock:
    """The database server's clock."""

    async def now(self, session: AsyncSession) -> datetime:
        if session.get_bind().dialect.name == "postgresql":
            value = await session.scalar(text("SELECT now()"))
            if not isinstance(value, datetime):
                raise TypeError(f"the database answered {value!r} for now()")
            return value.astimezone(UTC)
        raw = await session.scalar(text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"))
        return datetime.fromisoformat(str(raw)).replace(tzinfo=UTC)


class SharedClock:
    """A clock every replica shares (the simulated world's): the database's time under simulation."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def now(self, session: AsyncSession) -> datetime:
        return self.clock.now()


def database_clock(clock: Clock) -> DatabaseClock:
    """The server's clock in production; the simulated clock when the world's time is simulated."""
    return SharedClock(clock) if isinstance(clock, SimClock) else ServerClock()
