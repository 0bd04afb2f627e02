"""The decision log's reservation call sites: booked where and why, released, preempted, ended, each
written in the change's own transaction (gone with it when it fails), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.compute import batch
from better_compute.compute.reservations import end_reservation, end_reservations_on_node
from better_compute.core.errors import ComputeError
from better_compute.decisions import Event, Filters, acting_as, read, suspended

from .conftest import World
from .test_gpu_health import report, sick


async def events(world: World, **filters: Any) -> list[Event]:
    async with world.db.session() as session:
        return list((await read(session, tenant_id=world.tenant.id, filters=Filters(**filters), limit=1000)).events)


async def test_a_booking_says_where_it_went_and_why(world: World) -> None:
    await world.node("big", 8)
    small = await world.node("small", 4)
    spot = await world.node("spare", 4, spot=True)
    with acting_as("key_alice"):
        booked = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    on_spot = await world.compute.reservations.create(world.tenant.id, world.pool_id, 3, spot=True)

    (event,) = await events(world, reservation_id=booked.id)
    assert (event.kind, event.pool_id, event.node_id, event.node_name) == (
        "reservation.booked",
        world.pool_id,
        small.id,
        "small",
    )
    assert event.gpu_ids == ("GPU-small-0", "GPU-small-1")
    assert event.principal == "key_alice", "who asked"
    assert event.details == {"gpuCount": 2, "spot": False}
    assert event.reason == (
        "booked 2 GPU(s) on node small of pool gpu-fleet: no node with bcd connected had room (its bcd is away); "
        "best fit: 4 free GPU(s), the fewest of the 2 ready node(s) with room for 2"
    ), "the Spot node is no candidate for an on-demand booking"
    (spotted,) = await events(world, reservation_id=on_spot.id)
    assert spotted.node_id == spot.id and spotted.principal is None
    assert spotted.reason.startswith("booked 3 GPU(s) on Spot node spare of pool gpu-fleet: ")
    assert "a Spot booking takes Spot capacity first" in spotted.reason


async def test_a_refused_booking_records_nothing_and_a_suspended_log_neither(world: World) -> None:
    await world.node("n1", 2)
    with pytest.raises(ComputeError):
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 3)
    with suspended():
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert await events(world) == []


async def test_a_booking_whose_write_fails_leaves_no_event(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    await world.node("n1", 4)
    if world.db.is_postgres:  # the write is one call: the quota lowered under it makes the call fail whole
        write = batch._apply_in_one_call

        async def lowered(*args: Any) -> None:
            await world.compute.quotas.set(world.tenant.id, "H100", 1)
            await write(*args)

        monkeypatch.setattr(batch, "_apply_in_one_call", lowered)
    else:  # the charge, after the reservation and its event were written, fails

        async def broken(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the database went away")

        monkeypatch.setattr(batch, "charge", broken)
    with pytest.raises((ComputeError, RuntimeError)):
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert await world.compute.reservations.list(world.tenant.id) == []
    assert await events(world) == []


async def test_a_release_says_who_and_is_recorded_once(world: World) -> None:
    await world.node("n1", 4)
    booked = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    with acting_as("key_bob"):
        await world.compute.reservations.release(world.tenant.id, booked.id)
        await world.compute.reservations.release(world.tenant.id, booked.id)
    booked_event, released = await events(world, reservation_id=booked.id)
    assert (released.kind, released.reason, released.principal) == (
        "reservation.released",
        "the tenant released it",
        "key_bob",
    )
    assert released.gpu_ids == booked_event.gpu_ids and released.node_name == "n1"


async def test_an_end_that_rolls_back_leaves_no_event(world: World) -> None:
    await world.node("n1", 4)
    booked = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    with pytest.raises(RuntimeError):
        async with world.compute.reservations.transaction() as session:
            await end_reservation(session, now=world.clock.now(), reservation_id=booked.id, reason="gone")
            raise RuntimeError("the change failed after its decision was recorded")
    assert [e.kind for e in await events(world)] == ["reservation.booked"]
    assert (await world.compute.reservations.get(world.tenant.id, booked.id)).state == "active"


async def test_a_node_going_preempts_spot_bookings_and_releases_the_others_saying_why(world: World) -> None:
    spot = await world.node("spot-0", 2, spot=True)
    regular = await world.node("regular-0", 2)
    on_spot = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2, spot=True)
    bound = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    async with world.compute.reservations.transaction() as session:
        for node in (spot, regular):
            await end_reservations_on_node(session, now=world.clock.now(), node_id=node.id, reason="it was reclaimed")
    preempted = (await events(world, reservation_id=on_spot.id))[-1]
    assert (preempted.kind, preempted.reason) == (
        "reservation.preempted",
        "its Spot node spot-0 went: it was reclaimed",
    )
    assert preempted.node_id == spot.id and preempted.gpu_ids == ("GPU-spot-0-0", "GPU-spot-0-1")
    released = (await events(world, reservation_id=bound.id))[-1]
    assert (released.kind, released.reason) == ("reservation.released", "its node regular-0 went: it was reclaimed")


async def test_a_degraded_gpu_under_the_end_policy_ends_its_reservation_saying_which(world: World) -> None:
    pool = await world.compute.pools.create(
        world.tenant.id, "ends", world.site_id, "metal-host", "H100", {"health": {"degraded": "end"}}
    )
    node = await world.node("n1", 2, pool_id=pool.id)
    booked = await world.compute.reservations.create(world.tenant.id, pool.id, 2)
    await report(world, node, sick(node, 1))
    ended = (await events(world, reservation_id=booked.id))[-1]
    assert ended.kind == "reservation.ended"
    assert ended.reason == (
        "it holds an unhealthy GPU, GPU-n1-1 (xid, XID 79), and pool ends's policy.health.degraded is end"
    )
    assert ended.gpu_ids == ("GPU-n1-0", "GPU-n1-1")
