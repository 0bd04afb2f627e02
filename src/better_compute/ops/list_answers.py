"""Each tenant's list answers, kept encoded until the tenant's list version moves.

A list of 100 pools costs its statement (about 1 ms of SQLite's own for its 1,200 values) and the
processing of its rows on every request, against one primary-key read of the tenant's list version
(compute.listing.list_version), which the database's triggers move in every transaction that writes a
row the tenant's lists show (migration compute_0008). So a list request reads the version first: the
same as the one its kept answer was read under, and that answer is still the list; otherwise it reads
the rows and keeps what they encode under the version it read before them. The requests of a tenant
that arrive while its version read is in flight share the next one (one in flight per tenant): under
load a read serves many requests, and each request's read began after it arrived.

Never stale, across replicas too: the version moves in the writer's own transaction, so once a write has
committed, on any replica, every request that starts after it waits for a version read that begins later
still, and reads a version that no answer read before the write was kept under. An answer is kept under
a version read before its rows (a write committed in between makes it look older than
it is, and the next request reads again, never the reverse). A tenant with no version yet keeps nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from weakref import WeakKeyDictionary

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.listing import list_version
from better_compute.store import Database

__all__ = ["MAX_ANSWERS", "MAX_BYTES", "ListAnswers"]

MAX_ANSWERS = 2_000
MAX_BYTES = 64 * 1024 * 1024
"""The most answers, and bytes of them, one database's ListAnswers keeps; the oldest kept go first."""

Encode = Callable[[AsyncSession], Awaitable[bytes]]


class ListAnswers:
    """One database's kept list answers: (tenant, which list) -> (version, bytes), and its version reads."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._kept: dict[tuple[str, Hashable], tuple[int, bytes]] = {}
        self._bytes = 0
        self._next: dict[str, asyncio.Future[int | None]] = {}
        self._reading: dict[str, asyncio.Task[None]] = {}

    @staticmethod
    def of(db: Database) -> ListAnswers:
        """The database's own (each replica's Database keeps its answers; none outlives it)."""
        answers = _BY_DATABASE.get(db)
        if answers is None:
            answers = _BY_DATABASE[db] = ListAnswers(db)
        return answers

    async def answer(self, tenant_id: str, query: Hashable, encode: Encode, *, snapshot: bool = False) -> bytes:
        """The tenant's list `query` (which list, with its filters) as `encode` makes it from a session, or
        as it was kept if the tenant's list version has not moved since. `snapshot`: `encode` reads more
        than one statement, which must see one snapshot (a read session with BEGIN, `Database.session`)."""
        key = (tenant_id, query)
        version = await self._version(tenant_id)
        kept = self._kept.get(key)
        if version is not None and kept is not None and kept[0] == version:
            return kept[1]
        async with self._db.session() if snapshot else self._db.read() as session:
            answer = await encode(session)
        if version is not None:
            self._keep(key, version, answer)
        return answer

    async def _version(self, tenant_id: str) -> int | None:
        """The tenant's list version as read by a read that began after this call: the next one to begin,
        shared by every request of the tenant that arrives before it does (at most one is in flight)."""
        shared = self._next.get(tenant_id)
        if shared is None:
            shared = self._next[tenant_id] = asyncio.get_running_loop().create_future()
            shared.add_done_callback(_retrieved)
            after = self._reading.get(tenant_id)
            self._reading[tenant_id] = asyncio.create_task(self._read(tenant_id, shared, after))
        return await asyncio.shield(shared)

    async def _read(self, tenant_id: str, shared: asyncio.Future[int | None], after: asyncio.Task[None] | None) -> None:
        try:
            try:
                if after is not None:
                    await asyncio.wait([after])
            finally:  # a request that arrives from now on waits for the read after this one
                if self._next.get(tenant_id) is shared:
                    del self._next[tenant_id]
            async with self._db.read() as session:
                shared.set_result(await list_version(session, tenant_id))
        except asyncio.CancelledError:
            shared.cancel()
            raise
        except Exception as exc:  # the waiters' error (a database it cannot use is their 503)
            shared.set_exception(exc)
        finally:
            if self._reading.get(tenant_id) is asyncio.current_task():
                del self._reading[tenant_id]

    def _keep(self, key: tuple[str, Hashable], version: int, answer: bytes) -> None:
        kept = self._kept.pop(key, None)
        if kept is not None:
            self._bytes -= len(kept[1])
            if kept[0] > version:  # a request that read later kept a newer answer meanwhile
                version, answer = kept
        self._kept[key] = (version, answer)
        self._bytes += len(answer)
        while len(self._kept) > MAX_ANSWERS or self._bytes > MAX_BYTES:  # an answer past MAX_BYTES goes too
            oldest = next(iter(self._kept))
            self._bytes -= len(self._kept.pop(oldest)[1])


def _retrieved(shared: asyncio.Future[int | None]) -> None:
    """A read's error is its waiters'; none may be left (all cancelled), and then it goes unsaid."""
    if not shared.cancelled():
        shared.exception()


_BY_DATABASE: WeakKeyDictionary[Database, ListAnswers] = WeakKeyDictionary()
