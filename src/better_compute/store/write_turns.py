"""SQLite's one writer at a time, as a first-come, first-served queue inside the process.

SQLite lets one transaction write at a time, and a write transaction here takes the
file's write lock as it begins (`BEGIN IMMEDIATE`, see store.db). A writer that finds the
lock taken waits in SQLite's busy handler, which sleeps and polls: the lock then sits
idle between a commit and the next poll, a writer may lose its place to later ones again
and again, and under load some give up with "database is locked". Each waiter also holds
a pooled connection while it sleeps, which readers then lack.

Since one process owns a SQLite file (store.sqlite_lock), its write transactions take
turns on an asyncio lock before they check out a connection: the next in line begins the
moment the last one has committed or rolled back, in arrival order, and a waiter holds
nothing but its place. SQLite's own lock and busy timeout still guard against a second
process let in with `BC_SQLITE_SHARED=1`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["WAIT_SECONDS", "WriteTurns"]

WAIT_SECONDS = 30.0
"""How long a write waits for its turn before it fails as UNAVAILABLE (real time: this is
contention, not a duration of the spec). Turns are handed on in order, so a wait this long
means the process is overloaded or a writer is stuck, and its caller should retry later."""


@dataclass
class _Queue:
    """One event loop's turns (a lock and its waiters belong to one loop)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    holder: asyncio.Task[object] | None = None
    waiting: int = 0


class WriteTurns:
    """The queue of one SQLite database's write transactions."""

    def __init__(self, wait_seconds: float = WAIT_SECONDS) -> None:
        self.wait_seconds = wait_seconds
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()

    def waiting(self) -> int:
        """How many write transactions of the running event loop wait for their turn."""
        queue = self._queues.get(asyncio.get_running_loop())
        return queue.waiting if queue else 0

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for this write transaction's turn and hold it for the block.

        A task that asks again while it holds its turn would wait for itself: that is a bug
        (a write transaction opened inside another) and fails at once rather than hanging.
        """
        queue = self._queues.setdefault(asyncio.get_running_loop(), _Queue())
        task = asyncio.current_task()
        if task is not None and queue.holder is task:
            raise RuntimeError("a write transaction was opened inside another on SQLite: it would wait for itself")
        queue.waiting += 1
        try:
            async with asyncio.timeout(self.wait_seconds):
                await queue.lock.acquire()
        except TimeoutError:
            raise ComputeError(
                ErrorCode.UNAVAILABLE,
                f"the database is busy: a write waited {self.wait_seconds:g} s for its turn; try again shortly",
                retry_after=1.0,
            ) from None
        finally:
            queue.waiting -= 1
        queue.holder = task
        try:
            yield
        finally:
            queue.holder = None
            queue.lock.release()
