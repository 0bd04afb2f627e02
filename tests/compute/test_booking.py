"""Booking is transactional: concurrent bookers never share a device, and the counts add up."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from sqlalchemy import select

from better_compute.compute.tables import DeviceRow, ReservationRow
from better_compute.core.errors import ComputeError

from .conftest import World

BOOKERS = 50


async def _book_concurrently(world: World, asks: list[int]) -> tuple[list[str], list[tuple[int, ComputeError]]]:
    async def one(count: int) -> str | ComputeError:
        try:
            return (await world.compute.reservations.create(world.tenant.id, world.pool_id, count)).id
        except ComputeError as exc:
            return exc

    results = await asyncio.gather(*(one(n) for n in asks))
    booked = [r for r in results if isinstance(r, str)]
    return booked, [(ask, r) for ask, r in zip(asks, results, strict=True) if isinstance(r, ComputeError)]


async def test_fifty_concurrent_bookers_never_share_a_device(world: World) -> None:
    for i in range(6):
        await world.node(f"node-{i}", 8)
    rng = random.Random(42)
    asks = [rng.choice([1, 2, 3]) for _ in range(BOOKERS)]
    assert sum(asks) > 48  # more demand than supply, so bookers contend for the last devices

    booked, failed = await _book_concurrently(world, asks)

    assert booked
    assert {e.code for _, e in failed} <= {"UNAVAILABLE"}
    async with world.db.session() as session:
        reservations = list(await session.scalars(select(ReservationRow).where(ReservationRow.state == "active")))
        devices = {d.id: d for d in await session.scalars(select(DeviceRow))}
    assert {r.id for r in reservations} == set(booked)
    held = Counter(device_id for r in reservations for device_id in r.device_ids)
    assert held and max(held.values()) == 1  # no device is in two active reservations
    for r in reservations:
        assert len(r.device_ids) == r.gpu_count
        assert {devices[d].node_id for d in r.device_ids} == {r.node_id}
        assert all(devices[d].reservation_id == r.id for d in r.device_ids)
    assert sum(1 for d in devices.values() if d.reservation_id) == len(held) == sum(r.gpu_count for r in reservations)
    usage = await world.compute.quotas.usage(world.tenant.id, "H100")
    assert usage[0].used == len(held)
    # Every failure was real: no node had room left for what it asked.
    # Every refusal was real: free devices only get fewer here, and no node has room for what was refused.
    free_per_node = Counter(d.node_id for d in devices.values() if d.reservation_id is None)
    for ask, error in failed:
        assert "free GPU" in error.message
        assert max(free_per_node.values(), default=0) < ask


async def test_released_devices_are_booked_again(world: World) -> None:
    await world.node("node-a", 2)
    first = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    await world.compute.reservations.release(world.tenant.id, first.id)
    second = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert set(second.device_ids) == set(first.device_ids)
    assert (await world.compute.reservations.get(world.tenant.id, first.id)).state == "released"


async def test_a_booking_stays_on_one_node_and_fits_best(world: World) -> None:
    await world.node("big", 8)
    small = await world.node("small", 2)
    reservation = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert reservation.node_id == small.id  # best fit keeps the big node whole
    assert reservation.binding == "kubernetes"
    assert reservation.state == "active"
    error = None
    try:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 9)
    except ComputeError as exc:
        error = exc
    assert error is not None and error.code == "UNAVAILABLE" and error.path == "/gpuCount"


async def test_only_ready_nodes_take_bookings(world: World) -> None:
    await world.node("joining", 4, ready=False)
    cordoned = await world.node("cordoned", 4)
    await world.compute.nodes.cordon(world.tenant.id, cordoned.id)
    try:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
        raise AssertionError("booked a node that is not ready")
    except ComputeError as exc:
        assert exc.code == "UNAVAILABLE"
    await world.compute.nodes.uncordon(world.tenant.id, cordoned.id)
    reservation = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert reservation.node_id == cordoned.id
