"""Telling listeners, after commit, which nodes' assignments changed.

A write that changes what a node must hold (a booking, a release, a cordon, a system
label) calls `mark_changed(session, node_ids)` inside its transaction. The ids ride on
the session; `ChangeFeed.transaction()` calls every subscriber with them once the
transaction has committed, and never when it rolled back, so a listener (the gateway
pushing to bcd) never sees a change that did not happen. A failing listener is logged
and does not undo the write.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.store import Database

__all__ = ["ChangeFeed", "Listener", "mark_changed"]

Listener = Callable[[list[str]], Awaitable[None]]
_KEY = "bc.compute.changed_nodes"
log = logging.getLogger(__name__)


def mark_changed(session: AsyncSession, node_ids: Iterable[str]) -> None:
    """Record, on the caller's transaction, that these nodes' assignments changed."""
    changed: set[str] = session.info.setdefault(_KEY, set())
    changed.update(node_ids)


def take_changed(session: AsyncSession) -> list[str]:
    changed: set[str] = session.info.pop(_KEY, set())
    return sorted(changed)


class ChangeFeed:
    """Subscribers to node-assignment changes, and transactions that notify them after commit."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """`Database.transaction()`, then the listeners with the nodes it marked changed."""
        async with self.db.transaction() as session:
            yield session
        await self.notify(take_changed(session))

    async def notify(self, node_ids: list[str]) -> None:
        if not node_ids:
            return
        for listener in list(self._listeners):
            try:
                await listener(node_ids)
            except Exception:  # a listener's failure must not turn a committed write into an error
                log.exception("compute change listener %r failed for %d node(s)", listener, len(node_ids))
