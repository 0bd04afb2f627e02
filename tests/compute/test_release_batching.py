"""Concurrent releases of overlapping reservations: group commit ends each once, on SQLite and PostgreSQL.

Fifty callers at once: most release the same reservations two or three times over (and the
system preempts two of them meanwhile), some ask for another tenant's or for none that
exists. Each reservation ends once, its GPUs come back once, its quota is refunded once and its
decision is recorded once; the other tenant's stay booked. In one process they share one
transaction after the first (releasing.BatchReleaser); on PostgreSQL a second replica releasing
the same reservations at the same time changes none of that.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable
from typing import Any

import pytest
from sqlalchemy import event, select

from better_compute.compute import Reservation, compute_services
from better_compute.compute.tables import DeviceRow
from better_compute.core.errors import ComputeError
from better_compute.decisions.table import DecisionRow
from better_compute.store import Database

from .conftest import World

SEED = 3250


async def _booked(world: World) -> tuple[list[Reservation], list[Reservation], str]:
    """18 reservations of the tenant (24 GPUs on 3 nodes, quota 30) and 2 of another tenant's."""
    for n in range(3):
        await world.node(f"n{n}", 8)
    await world.compute.quotas.set(world.tenant.id, "H100", 30)
    r = world.compute.reservations
    mine = [await r.create(world.tenant.id, world.pool_id, 1 if i < 12 else 2) for i in range(18)]
    other = await world.iam.create_tenant("other")
    site = await world.compute.sites.create(other.id, "k8s", "shared", "us-east-1")
    pool = await world.compute.pools.create(other.id, "theirs", site.id, "metal-host", "H100", {"kubernetes": {}})
    await world.node("theirs", 4, pool_id=pool.id)
    theirs = [await r.create(other.id, pool.id, 2) for _ in range(2)]
    return mine, theirs, other.id


def _calls(world: World, services: list[Any], mine: list[Reservation], theirs: list[Reservation]) -> list[Any]:
    """Fifty calls, shuffled: each of the first 14 reservations released three times (two of them
    preempted by the system as well), another tenant's asked for twice each, two that do not exist."""
    rng = random.Random(SEED)
    calls: list[tuple[str, str, str]] = [("release", x.id, "mine") for x in mine[:14] for _ in range(3)]
    calls += [("end", mine[0].id, "system"), ("end", mine[13].id, "system")]
    calls += [("release", x.id, "theirs") for x in theirs for _ in range(2)]
    calls += [("release", "rsv_none", "none"), ("release", "rsv_gone", "none")]
    assert len(calls) == 50
    rng.shuffle(calls)
    return [(call, services[i % len(services)]) for i, call in enumerate(calls)]


def _start(world: World, call: tuple[str, str, str], compute: Any) -> Awaitable[Reservation]:
    what, reservation_id, _ = call
    if what == "end":
        return compute.reservations.end(reservation_id, "preempted", reason="the system took it back")  # type: ignore[no-any-return]
    return compute.reservations.release(world.tenant.id, reservation_id)  # type: ignore[no-any-return]


async def _check(
    world: World,
    calls: list[Any],
    results: list[Reservation | BaseException],
    mine: list[Reservation],
    theirs: list[Reservation],
    other_id: str,
    notified: list[list[str]],
) -> None:
    ended = {x.id: x for x in mine[:14]}
    kept = mine[14:] + theirs
    seen: dict[str, set[str]] = {rid: set() for rid in ended}
    for ((_, reservation_id, whose), _), result in zip(calls, results, strict=True):
        if whose in ("theirs", "none"):
            assert isinstance(result, ComputeError) and result.code == "NOT_FOUND", result
            assert result.path == "/reservationId"
            continue
        assert isinstance(result, Reservation), result
        assert result.id == reservation_id and result.state in ("released", "preempted")
        seen[reservation_id].add(result.state)
    assert all(len(states) == 1 for states in seen.values()), "every caller sees the one way it ended"

    r = world.compute.reservations
    now = {x.id: x for x in await r.list(world.tenant.id)} | {x.id: x for x in await r.list(other_id)}
    assert {rid: now[rid].state for rid in ended} == {rid: states.pop() for rid, states in seen.items()}
    assert all(now[x.id].state == "active" for x in kept), "the others' and the unasked stay booked"
    mine_used = (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used
    assert mine_used == sum(x.gpu_count for x in mine[14:]) == 8, "refunded exactly once"
    assert (await world.compute.quotas.usage(other_id, "H100"))[0].used == 4

    async with world.db.session() as session:
        holders = {d: r for d, r in (await session.execute(select(DeviceRow.id, DeviceRow.reservation_id))).all()}
        logged = (
            await session.execute(
                select(DecisionRow.reservation_id, DecisionRow.kind, DecisionRow.gpu_ids).where(
                    DecisionRow.kind.in_(["reservation.released", "reservation.preempted"])
                )
            )
        ).all()
    assert Counter(holders.values()) == Counter(
        {x.id: x.gpu_count for x in kept} | {None: 28 - sum(x.gpu_count for x in kept)}
    ), "each ended reservation's GPUs are free, the others' still held"
    assert Counter(rid for rid, _, _ in logged) == Counter(list(ended)), "one decision per reservation ended"
    assert {rid: kind for rid, kind, _ in logged} == {rid: f"reservation.{now[rid].state}" for rid in ended}
    freed = [gpu for _, _, gpus in logged for gpu in gpus]
    assert len(freed) == len(set(freed)) == sum(x.gpu_count for x in ended.values()), "each GPU freed once"
    assert {n for ids in notified for n in ids} == {x.node_id for x in ended.values()}


async def test_fifty_concurrent_releasers_of_overlapping_reservations_end_each_once(world: World) -> None:
    mine, theirs, other_id = await _booked(world)
    notified: list[list[str]] = []

    async def listener(node_ids: list[str]) -> None:
        notified.append(node_ids)

    world.compute.reservations.subscribe(listener)
    ends = 0

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal ends
        ends += "UPDATE compute_reservations" in statement

    event.listen(world.db.engine.sync_engine, "before_cursor_execute", count)
    calls = _calls(world, [world.compute], mine, theirs)
    results = await asyncio.gather(*(_start(world, call, compute) for call, compute in calls), return_exceptions=True)
    event.remove(world.db.engine.sync_engine, "before_cursor_execute", count)

    await _check(world, calls, results, mine, theirs, other_id, notified)
    # The first caller found the releaser idle; the 49 that queued behind it shared one transaction
    # and one UPDATE of their reservations (on PostgreSQL the whole batch is one statement).
    assert ends == 2
    assert len(notified) == 2


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_two_replicas_releasing_the_same_reservations_end_each_once(world: World) -> None:
    """The replicas' batches overlap; the rows locked in id order settle which one ends each."""
    mine, theirs, other_id = await _booked(world)
    notified: list[list[str]] = []

    async def listener(node_ids: list[str]) -> None:
        notified.append(node_ids)

    other = Database(world.db.url)
    try:
        replica = compute_services(other, world.clock)
        for services in (world.compute, replica):
            services.reservations.subscribe(listener)
        calls = _calls(world, [world.compute, replica], mine, theirs)
        results = await asyncio.gather(
            *(_start(world, call, compute) for call, compute in calls), return_exceptions=True
        )
    finally:
        await other.dispose()
    await _check(world, calls, results, mine, theirs, other_id, notified)
