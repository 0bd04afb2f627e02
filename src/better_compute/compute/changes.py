"""Telling listeners, after commit, which nodes' assignments (and which pools' states) changed.

A write that changes what a node must hold (a booking, a release, a cordon, a system
label) calls `mark_changed(session, node_ids)` inside its transaction. The ids ride on
the session; `ChangeFeed.transaction()` calls every subscriber with them once the
transaction has committed, and never when it rolled back, so a listener (the gateway
pushing to bcd) never sees a change that did not happen. A failing listener is logged
and does not undo the write.

A write that changes how a module reports a pool (a substrate's state or message:
creating, ready, error) calls `mark_pools_changed(session, pool_ids)` the same way; those
ids go to the pool listeners (`subscribe_pools`: the web console), never to the node
listeners, which push assignments to bcd.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.store import Database

__all__ = ["ChangeFeed", "Listener", "mark_changed", "mark_pools_changed"]

Listener = Callable[[list[str]], Awaitable[None]]
_KEY = "bc.compute.changed_nodes"
_POOLS_KEY = "bc.compute.changed_pools"
log = logging.getLogger(__name__)


def mark_changed(session: AsyncSession, node_ids: Iterable[str]) -> None:
    """Record, on the caller's transaction, that these nodes' assignments changed."""
    changed: set[str] = session.info.setdefault(_KEY, set())
    changed.update(node_ids)


def take_changed(session: AsyncSession) -> list[str]:
    changed: set[str] = session.info.pop(_KEY, set())
    return sorted(changed)


def mark_pools_changed(session: AsyncSession, pool_ids: Iterable[str]) -> None:
    """Record, on the caller's transaction, that these pools' reported state changed."""
    changed: set[str] = session.info.setdefault(_POOLS_KEY, set())
    changed.update(pool_ids)


class ChangeFeed:
    """Subscribers to node-assignment and pool-state changes, and transactions that notify them after commit."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._listeners: list[Listener] = []
        self._pool_listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener of node ids; returns a function that removes it."""
        return _add(self._listeners, listener)

    def subscribe_pools(self, listener: Listener) -> Callable[[], None]:
        """Add a listener of pool ids (a pool's reported state changed); returns a function that removes it."""
        return _add(self._pool_listeners, listener)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """`Database.transaction()`, then the listeners with the nodes and pools it marked changed."""
        async with self.db.transaction() as session:
            yield session
        await self.notify(take_changed(session))
        pools: set[str] = session.info.pop(_POOLS_KEY, set())
        await _call(self._pool_listeners, sorted(pools))

    async def notify(self, node_ids: list[str]) -> None:
        await _call(self._listeners, node_ids)


def _add(listeners: list[Listener], listener: Listener) -> Callable[[], None]:
    listeners.append(listener)
    return lambda: listeners.remove(listener) if listener in listeners else None


async def _call(listeners: list[Listener], ids: list[str]) -> None:
    if not ids:
        return
    for listener in list(listeners):
        try:
            await listener(ids)
        except Exception:  # a listener's failure must not turn a committed write into an error
            log.exception("compute change listener %r failed for %d id(s)", listener, len(ids))
