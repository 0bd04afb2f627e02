"""Quota per tenant and GPU model: charged on booking, refunded exactly once."""

from __future__ import annotations

import asyncio

import pytest

from better_compute.core.errors import ComputeError

from .conftest import World


async def _used(world: World) -> int:
    return (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used


async def test_a_booking_past_the_limit_is_refused(world: World) -> None:
    await world.node("node-0", 8)
    assert (await world.compute.quotas.set(world.tenant.id, "H100", 4)).limit == 4
    await world.compute.reservations.create(world.tenant.id, world.pool_id, 3)
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert (err.value.code, err.value.path, err.value.reason) == ("CONFLICT", "/gpuCount", "quota-exceeded")
    assert await _used(world) == 3
    assert len(await world.compute.reservations.list(world.tenant.id, state="active")) == 1
    await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert await _used(world) == 4


async def test_a_system_release_run_twice_refunds_once(world: World) -> None:
    await world.node("node-0", 8)
    await world.compute.quotas.set(world.tenant.id, "H100", 8)
    kept = await world.compute.reservations.create(world.tenant.id, world.pool_id, 3)
    ended = await world.compute.reservations.create(world.tenant.id, world.pool_id, 4)
    assert await _used(world) == 7
    first = await world.compute.reservations.end(ended.id, "released", reason="test")
    second = await world.compute.reservations.end(ended.id, "released", reason="test")
    again = await world.compute.reservations.release(world.tenant.id, ended.id)
    assert (first.state, second.state, again.state) == ("released", "released", "released")
    assert await _used(world) == kept.gpu_count
    assert (await world.compute.reservations.assignments(kept.node_id)).reservations[0].reservation_id == kept.id


async def test_concurrent_system_releases_refund_once(world: World) -> None:
    await world.node("node-0", 8)
    kept = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    targets = [await world.compute.reservations.create(world.tenant.id, world.pool_id, 2) for _ in range(3)]
    assert await _used(world) == 7
    ends = [
        world.compute.reservations.end(t.id, state, reason="test")
        for t in targets
        for state in ("released", "preempted")
    ] * 3
    results = await asyncio.gather(*ends)
    assert {r.state for r in results} <= {"released", "preempted"}
    assert await _used(world) == kept.gpu_count
    for target in targets:  # each ended in exactly one state, the same whoever asks
        states = {r.state for r in results if r.id == target.id}
        assert len(states) == 1


async def test_quota_is_per_tenant_and_model(world: World) -> None:
    await world.node("node-0", 8)
    other = await world.iam.create_tenant("other")
    await world.compute.quotas.set(other.id, "H100", 0)
    await world.compute.quotas.set(world.tenant.id, "L4", 0)
    await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    usage = {u.gpu_model: (u.limit, u.used) for u in await world.compute.quotas.usage(world.tenant.id)}
    assert usage == {"H100": (None, 2), "L4": (0, 0)}
    assert (await world.compute.quotas.usage(other.id, "H100"))[0].used == 0


async def test_a_negative_or_malformed_limit_is_refused_and_changes_nothing(world: World) -> None:
    await world.compute.quotas.set(world.tenant.id, "H100", 5)
    for bad in [-1, 1.5, "3", True]:
        with pytest.raises(ComputeError) as err:
            await world.compute.quotas.set(world.tenant.id, "H100", bad)  # type: ignore[arg-type]
        assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/limit")
    with pytest.raises(ComputeError) as err:
        await world.compute.quotas.set("ten_unknown", "H100", 5)
    assert (err.value.code, err.value.path) == ("NOT_FOUND", "/tenantId")
    with pytest.raises(ComputeError) as err:
        await world.compute.quotas.set(world.tenant.id, "", 5)
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/gpuModel")
    assert [(u.gpu_model, u.limit) for u in await world.compute.quotas.usage(world.tenant.id)] == [("H100", 5)]


async def test_concurrent_bookers_never_pass_the_limit(world: World) -> None:
    for i in range(4):
        await world.node(f"node-{i}", 8)
    await world.compute.quotas.set(world.tenant.id, "H100", 20)

    async def one() -> int:
        try:
            return (await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)).gpu_count
        except ComputeError as exc:
            assert exc.reason == "quota-exceeded"
            return 0

    booked = await asyncio.gather(*(one() for _ in range(30)))
    assert sum(booked) == 20 == await _used(world)
    assert len(await world.compute.reservations.list(world.tenant.id, state="active")) == 20
