"""Spot placement: nothing sold as uninterruptible sits on a node the provider may reclaim."""

from __future__ import annotations

import pytest

from better_compute.compute import SPOT_LABEL, end_reservations_on_node, mark_ready, register_node, set_system_label
from better_compute.core.errors import ComputeError

from .conftest import World


async def test_a_non_spot_reservation_never_lands_on_a_spot_node(world: World) -> None:
    spot = await world.node("spot-0", 8, spot=True)
    regular = await world.node("regular-0", 2)
    assert spot.spot and spot.system_labels == {SPOT_LABEL: "spot"}
    placed = [await world.compute.reservations.create(world.tenant.id, world.pool_id, 1) for _ in range(2)]
    assert {r.node_id for r in placed} == {regular.id}
    with pytest.raises(ComputeError) as err:  # the spot node has 8 free GPUs, and still none of them is taken
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert err.value.code == "UNAVAILABLE"
    assert (await world.compute.reservations.assignments(spot.id)).reservations == ()


async def test_a_spot_reservation_may_go_anywhere_and_prefers_spot_nodes(world: World) -> None:
    regular = await world.node("regular-0", 2)
    spot = await world.node("spot-0", 4, spot=True)
    first = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2, spot=True)
    assert first.node_id == spot.id and first.spot
    await world.compute.reservations.create(world.tenant.id, world.pool_id, 2, spot=True)
    third = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2, spot=True)
    assert third.node_id == regular.id  # spot is full; a spot booking may still use an on-demand node


async def test_a_node_labelled_spot_later_takes_no_new_on_demand_bookings(world: World) -> None:
    node = await world.node("late-spot", 4)
    async with world.compute.reservations.transaction() as session:
        await set_system_label(session, node.id, SPOT_LABEL, "spot", world.clock.now())
    with pytest.raises(ComputeError):
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    async with world.compute.reservations.transaction() as session:
        await set_system_label(session, node.id, SPOT_LABEL, None, world.clock.now())
    assert (await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)).node_id == node.id


async def test_when_a_node_goes_spot_bookings_are_preempted_and_bound_ones_released(world: World) -> None:
    regular = await world.node("regular-0", 4)
    spot = await world.node("spot-0", 2, spot=True)
    on_spot = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2, spot=True)
    bound = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    spot_on_regular = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1, spot=True)
    assert (on_spot.node_id, bound.node_id, spot_on_regular.node_id) == (spot.id, regular.id, regular.id)
    async with world.compute.reservations.transaction() as session:
        ended_spot = await end_reservations_on_node(session, now=world.clock.now(), node_id=spot.id, reason="gone")
        ended_regular = await end_reservations_on_node(
            session, now=world.clock.now(), node_id=regular.id, reason="gone"
        )
    assert [(r.id, r.state) for r in ended_spot] == [(on_spot.id, "preempted")]
    assert {(r.id, r.state) for r in ended_regular} == {(bound.id, "released"), (spot_on_regular.id, "preempted")}
    assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 0


async def test_a_node_registered_as_spot_is_never_bookable_on_demand(world: World) -> None:
    gpus = [{"index": 0, "uuid": "GPU-s-0", "model": "H100"}]
    async with world.compute.reservations.transaction() as session:
        node = await register_node(
            session,
            now=world.clock.now(),
            pool_id=world.pool_id,
            name="spot-born",
            inventory={"gpus": gpus},
            system_labels={SPOT_LABEL: "spot"},
        )
        await mark_ready(session, node.id, world.clock.now())
    assert node.spot
    with pytest.raises(ComputeError):
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert (await world.compute.reservations.create(world.tenant.id, world.pool_id, 1, spot=True)).node_id == node.id
    with pytest.raises(ComputeError) as err:
        async with world.compute.reservations.transaction() as session:
            await register_node(
                session, now=world.clock.now(), pool_id=world.pool_id, name="x", system_labels={"team": "a"}
            )
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/systemLabels")
