"""Each tenant's list answers, kept encoded until the tenant's list version moves.

A list of 100 pools costs its statement (about 1 ms of SQLite's own for its 1,200 values) and the
processing of its rows on every request, against one primary-key read of the tenant's list version
(compute.listing.list_version), which the database's triggers move in every transaction that writes a
row the tenant's lists show (migration compute_0008). So a list request reads the version first: the
same as the one its kept answer was read under, and that answer is still the list; otherwise it reads
the rows (in the same session) and keeps what they encode under the version it read before them.

Never stale, across replicas too: the version moves in the writer's own transaction, so once a write has
committed, on any replica, every request that starts after it reads a version that no answer read before
it was kept under. An answer is kept under a version read no later than its rows (a write committed in
between makes it look older than it is, and the next request reads again, never the reverse). A tenant
with no version yet keeps nothing.
"""

from __future__ import annotations

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
    """One database's kept list answers: (tenant, which list) -> (version, bytes)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, Hashable], tuple[int, bytes]] = {}
        self._bytes = 0

    @staticmethod
    def of(db: Database) -> ListAnswers:
        """The database's own (each replica's Database keeps its answers; none outlives it)."""
        answers = _BY_DATABASE.get(db)
        if answers is None:
            answers = _BY_DATABASE[db] = ListAnswers()
        return answers

    async def answer(
        self, db: Database, tenant_id: str, query: Hashable, encode: Encode, *, snapshot: bool = False
    ) -> bytes:
        """The tenant's list `query` (which list, with its filters) as `encode` makes it from a session, or
        as it was kept if the tenant's list version has not moved since. `snapshot`: `encode` reads more
        than one statement, which must see one snapshot (a read session with BEGIN, `Database.session`)."""
        key = (tenant_id, query)
        async with db.session() if snapshot else db.read() as session:
            version = await list_version(session, tenant_id)
            kept = self._kept.get(key)
            if version is not None and kept is not None and kept[0] == version:
                return kept[1]
            answer = await encode(session)
        if version is not None:
            self._keep(key, version, answer)
        return answer

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


_BY_DATABASE: WeakKeyDictionary[Database, ListAnswers] = WeakKeyDictionary()
