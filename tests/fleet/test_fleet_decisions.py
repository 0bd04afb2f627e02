"""The decision log's fleet call site: an apply that changed something records who applied it and the
counts of what changed, in the apply's transaction (gone with it when it fails), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fleet_documents import example
from fleet_store import Harness, harness

from better_compute.core.clock import SimClock
from better_compute.decisions import Event, Filters, acting_as, read
from better_compute.fleet import service
from better_compute.store import Database


@pytest.fixture
async def h(database: Database, clock: SimClock) -> Harness:
    return await harness(database, clock)


async def events(h: Harness) -> list[Event]:
    async with h.db.session() as session:
        return list((await read(session, tenant_id=h.tenant_id, filters=Filters(kind="fleet.applied"))).events)


async def test_an_apply_records_who_applied_it_and_what_changed_once(h: Harness) -> None:
    document = example("doks", tenant_id=h.tenant_id)
    with acting_as("key_ops"):
        await h.fleet.apply(document, tenant_id=h.tenant_id)
        await h.fleet.apply(document, tenant_id=h.tenant_id)  # nothing to change: no decision
    (applied,) = await events(h)
    assert (applied.reason, applied.principal) == ("FleetConfig revision 1 applied: 3 create", "key_ops")
    assert applied.details == {
        "revision": 1,
        "counts": {"create": 3, "update": 0, "unchanged": 0, "delete": 0, "keep": 0, "blocked": 0},
        "prune": False,
        "substratesQueued": 1,
    }


async def test_an_apply_that_fails_after_writing_leaves_no_event(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = 0
    real = service.read_snapshot

    async def fails_second(*args: Any) -> Any:
        nonlocal reads
        reads += 1
        if reads == 2:  # the read-back after the write, before commit
            raise RuntimeError("the state could not be read back")
        return await real(*args)

    monkeypatch.setattr(service, "read_snapshot", fails_second)
    with pytest.raises(RuntimeError):
        await h.fleet.apply(example("doks", tenant_id=h.tenant_id), tenant_id=h.tenant_id)
    assert await events(h) == []
    assert (await h.counts())["compute_pools"] == 0
