"""Group commit: concurrent writes of one kind in one process share a transaction.

Bookings (batch) and releases (releasing) use it. A write that takes its transaction
alone pays its statements' round trips and its COMMIT by itself, and concurrent ones meet
on the same rows (a tenant's quota row above all), so they end up taking turns anyway.
Here the first caller to take the lock becomes the leader: it takes every request queued
so far (its own and those that arrived while the previous batch ran) and writes them all
at once (`_attempts`, with a fixed number of statements whatever the batch's size); each
caller gets its own result or its own error.

The others find their result set when they get the lock. The batch runs in a task of
its own that a cancelled leader waits for: once a COMMIT is sent, whether it took
effect is known only when it returns, so the results are settled first and the
leader's cancellation is let through after. (Putting the requests back for another
leader instead booked them twice when the COMMIT had gone through.) The change hook
is called by the leader after it has let go of the lock.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from .changes import ChangeFeed

__all__ = ["MAX_BATCH", "GroupCommit"]

MAX_BATCH = 256
R = TypeVar("R")
T = TypeVar("T")


class GroupCommit(Generic[R, T]):
    """The leader election and the settling of results; subclasses write a batch (`_attempts`)."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed
        # PostgreSQL: each statement of a batch locks, checks and writes everything or nothing by
        # itself, so the batch needs no BEGIN or COMMIT (one round trip less each way).
        self._autocommit = (
            async_sessionmaker(
                feed.db.engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False, autoflush=False
            )
            if feed.db.is_postgres
            else None
        )
        self.lock = asyncio.Lock()
        """Elects the leader; the batch's transaction then takes its turn among the writers."""
        self._pending: list[tuple[R, asyncio.Future[T]]] = []
        self._notifying: set[asyncio.Future[None]] = set()

    def _session(self) -> AbstractAsyncContextManager[AsyncSession]:
        """Where a batch is written: an autocommit session on PostgreSQL, a transaction on SQLite."""
        return self._autocommit() if self._autocommit else self.feed.db.transaction()

    async def _attempts(self, batch: list[R]) -> tuple[list[T | Exception], list[str]]:
        """Write the batch: each request's result or error, in order, and the nodes whose assignments changed."""
        raise NotImplementedError

    async def submit(self, request: R) -> T:
        """Queue the request and wait for its result, leading the batches while this caller holds the lock."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        entry = (request, future)
        self._pending.append(entry)
        changed: set[str] = set()
        cancelled = False
        try:
            async with self.lock:
                while not future.done():
                    batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                    cancelled = await self._run(batch, changed)
        except asyncio.CancelledError:  # while waiting for the lock: nothing of ours ran
            if entry in self._pending:
                self._pending.remove(entry)
            future.cancel()
            raise
        # Listeners run outside the write lock: a slow one must not hold up the writers, nor deadlock
        # by writing itself. A cancelled leader leaves them to a task, since its batch committed.
        if cancelled:
            notify = asyncio.ensure_future(self.feed.notify(sorted(changed)))
            self._notifying.add(notify)
            notify.add_done_callback(self._notifying.discard)
            raise asyncio.CancelledError
        await self.feed.notify(sorted(changed))
        return future.result()

    async def _run(self, batch: list[tuple[R, asyncio.Future[T]]], changed: set[str]) -> bool:
        """Write the batch, settle its futures and add the nodes whose assignments changed.

        A cancellation waits for the batch to finish and its futures to be settled, and is
        then reported (True) for the caller to let through.
        """
        outcomes: list[T | Exception]
        requests = [r for r, _ in batch]
        attempts = asyncio.ensure_future(self._attempts(requests))
        cancelled = False
        while not attempts.done():
            try:
                await asyncio.wait({attempts})  # a cancelled wait leaves the batch running
            except asyncio.CancelledError:
                cancelled = True
        try:
            outcomes, nodes = attempts.result()
            changed.update(nodes)
        except Exception as exc:  # a database failure: every request of the batch gets it
            outcomes = [exc] * len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        return cancelled
