"""Wake-ups across replicas on PostgreSQL: a write that queues work NOTIFYs, every engine LISTENs.

`enqueue` sends `NOTIFY better_compute_work` in the caller's transaction, so it is
delivered when, and only if, that transaction commits (PostgreSQL folds the identical
notifications of one transaction into one). Each serving engine holds one connection
of its own, LISTENs on the channel and calls its `wake()` on each notification, so a
replica finds work another replica queued at once rather than at its next poll. When
the connection drops, `listen_for_work` connects again after `retry_seconds` and
wakes once, in case a notification went by meanwhile; the poll stays the floor.
SQLite runs one process, whose own `wake()` is enough: nothing is sent there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.store import Database

__all__ = ["CHANNEL", "listen", "listen_for_work", "notify_work"]

log = logging.getLogger("better_compute.engine")

CHANNEL = "better_compute_work"


async def notify_work(session: AsyncSession) -> None:
    """Tell every replica, once the caller's transaction commits, that work was queued."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text(f"NOTIFY {CHANNEL}"))


async def listen_for_work(
    db: Database, wake: Callable[[], None], *, sleep: Callable[[float], Awaitable[None]], retry_seconds: float = 1.0
) -> None:
    """Call `wake()` on every notification on `CHANNEL`, until cancelled; see the module docstring."""
    await listen(db, CHANNEL, lambda _: wake(), connected=wake, sleep=sleep, retry_seconds=retry_seconds)


async def listen(
    db: Database,
    channel: str,
    notified: Callable[[str], None],
    *,
    connected: Callable[[], None],
    lost: Callable[[], None] = lambda: None,
    sleep: Callable[[float], Awaitable[None]],
    retry_seconds: float = 1.0,
) -> None:
    """LISTEN on `channel` on a connection of its own, until cancelled: `notified(payload)` on each
    notification, `connected()` once listening (anything sent while no one listened is lost), `lost()`
    when the connection drops, after which it connects again after `retry_seconds`."""
    import asyncpg  # type: ignore[import-untyped]  # the postgres extra; only a PostgreSQL engine gets here

    dsn = make_url(db.url).set(drivername="postgresql").render_as_string(hide_password=False)
    while True:
        try:
            connection = await asyncpg.connect(dsn)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("could not listen on %s (%s); trying again", channel, type(exc).__name__)
            await sleep(retry_seconds)
            continue
        try:
            await _listen(connection, channel, notified, connected)
        finally:
            lost()
            with contextlib.suppress(Exception):
                await asyncio.shield(connection.close(timeout=5))
        log.warning("the connection listening on %s dropped; listening again", channel)


async def _listen(
    connection: Any, channel: str, notified: Callable[[str], None], connected: Callable[[], None]
) -> None:
    """Call `notified` on each notification until `connection` drops."""
    done = asyncio.Event()
    connection.add_termination_listener(lambda _: done.set())
    await connection.add_listener(channel, lambda _connection, _pid, _channel, payload: notified(payload))
    connected()
    await done.wait()
