"""The decision log: written in the caller's transaction, read per tenant by filter and cursor, compacted."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.decisions import Cursor, Decision, Filters, Kind, compact, get, read, record
from better_compute.engine.compaction import EVERY, compact_forever
from better_compute.iam import Iam
from better_compute.store import Database


async def tenants(database: Database, clock: SimClock) -> tuple[str, str]:
    iam = Iam(database, clock)
    return (await iam.create_tenant("acme")).id, (await iam.create_tenant("globex")).id


async def everything(database: Database, tenant_id: str, filters: Filters | None = None) -> list[str]:
    async with database.session() as session:
        page = await read(session, tenant_id=tenant_id, filters=filters or Filters(), limit=1000)
    return [e.reason for e in page.events]


async def test_an_event_commits_with_its_change_and_rolls_back_with_it(database: Database, clock: SimClock) -> None:
    acme, _ = await tenants(database, clock)
    async with database.transaction() as session:
        await record(session, clock.now(), Decision(Kind.CORDONED, acme, "kept", node_id="node_a"))
    with pytest.raises(RuntimeError):
        async with database.transaction() as session:
            await record(session, clock.now(), Decision(Kind.RETIRED, acme, "rolled back", node_id="node_a"))
            raise RuntimeError("the change failed after its decision was recorded")
    assert await everything(database, acme) == ["kept"]


async def test_filters_and_pages_read_the_tenants_events_in_order(database: Database, clock: SimClock) -> None:
    acme, _ = await tenants(database, clock)
    async with database.transaction() as session:
        for n, (kind, node, reservation) in enumerate(
            [
                (Kind.BOOKED, "node_a", "res_1"),
                (Kind.BOOKED, "node_b", "res_2"),
                (Kind.CORDONED, "node_a", None),
                (Kind.PREEMPTED, "node_a", "res_1"),
                (Kind.RETIRED, "node_a", None),
            ]
        ):
            decision = Decision(
                kind, acme, f"e{n}", pool_id="pool_1", node_id=node, node_name=node.replace("_", "-"),
                reservation_id=reservation, gpu_ids=("GPU-1",),
            )  # fmt: skip
            await record(session, clock.now() + timedelta(seconds=n // 2), decision)
    assert await everything(database, acme, Filters(reservation_id="res_1")) == ["e0", "e3"]
    assert await everything(database, acme, Filters(node="node_a")) == ["e0", "e2", "e3", "e4"]
    assert await everything(database, acme, Filters(node="node-b")) == ["e1"], "by its name too"
    assert await everything(database, acme, Filters(kind="node.retired")) == ["e4"]
    assert await everything(database, acme, Filters(pool_id="pool_1", since=clock.now() + timedelta(seconds=1))) == [
        "e2",
        "e3",
        "e4",
    ]
    paged, after = [], None
    async with database.session() as session:
        while True:
            page = await read(session, tenant_id=acme, filters=Filters(), limit=2, after=after)
            paged.append([e.reason for e in page.events])
            if page.next is None:
                break
            after = Cursor.decode(page.next.encode())
    assert paged == [["e0", "e1"], ["e2", "e3"], ["e4"]], "each event once, oldest first, across ties in time"


async def test_a_tenant_never_reads_another_tenants_events(database: Database, clock: SimClock) -> None:
    acme, globex = await tenants(database, clock)
    async with database.transaction() as session:
        await record(session, clock.now(), Decision(Kind.PREEMPTED, acme, "reclaimed", reservation_id="res_1"))
    async with database.session() as session:
        (event,) = (await read(session, tenant_id=acme, filters=Filters())).events
        assert (await get(session, tenant_id=acme, event_id=event.id)).reason == "reclaimed"
        with pytest.raises(ComputeError) as refused:
            await get(session, tenant_id=globex, event_id=event.id)
    assert (refused.value.code.value, refused.value.path) == ("NOT_FOUND", "/eventId")
    assert await everything(database, globex, Filters(reservation_id="res_1")) == []
    assert await everything(database, globex) == []


async def test_bad_filters_name_their_field(database: Database, clock: SimClock) -> None:
    acme, _ = await tenants(database, clock)
    with pytest.raises(ComputeError) as kind:
        Filters(kind="node.exploded")
    assert kind.value.path == "/kind"
    with pytest.raises(ComputeError) as cursor:
        Cursor.decode("not-a-cursor")
    assert cursor.value.path == "/cursor"
    async with database.session() as session:
        with pytest.raises(ComputeError) as limit:
            await read(session, tenant_id=acme, filters=Filters(), limit=0)
    assert limit.value.path == "/limit"


async def test_a_reason_never_stores_a_token(database: Database, clock: SimClock) -> None:
    acme, _ = await tenants(database, clock)
    token = "bcj_" + "x" * 40
    async with database.transaction() as session:
        await record(session, clock.now(), Decision(Kind.TOKEN_REVOKED, acme, f"revoked {token}"))
    (reason,) = await everything(database, acme)
    assert token not in reason and "[REDACTED]" in reason


async def test_events_past_the_retention_are_compacted_in_batches(database: Database, clock: SimClock) -> None:
    acme, _ = await tenants(database, clock)
    async with database.transaction() as session:
        for n in range(5):
            await record(session, clock.now(), Decision(Kind.BOOKED, acme, f"old{n}"))
    clock.advance(timedelta(days=30).total_seconds())
    async with database.transaction() as session:
        await record(session, clock.now(), Decision(Kind.RELEASED, acme, "new"))
    assert await compact(database, now=clock.now(), retention=timedelta(days=30), batch=2) == 0, "exactly 30 days"
    clock.advance(1)
    assert await compact(database, now=clock.now(), retention=timedelta(days=30), batch=2) == 5
    assert await everything(database, acme) == ["new"]


async def test_the_engine_compacts_the_log_on_its_schedule(database: Database, clock: SimClock) -> None:
    acme, _ = await tenants(database, clock)
    async with database.transaction() as session:
        await record(session, clock.now(), Decision(Kind.BOOKED, acme, "old"))
    removed: list[int] = []
    ran = asyncio.Event()

    async def events(now: datetime) -> int:
        removed.append(await compact(database, now=now, retention=timedelta(seconds=EVERY / 2)))
        ran.set()
        return removed[-1]

    task = asyncio.create_task(compact_forever(database, clock, also=[("events", events)]))
    try:
        while clock.next_wakeup() is None:
            await asyncio.sleep(0)
        clock.advance(EVERY - 1)
        await asyncio.sleep(0)
        assert not ran.is_set(), "not before its schedule"
        clock.advance(1)
        await asyncio.wait_for(ran.wait(), 30)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert removed == [1]
    assert await everything(database, acme) == []
