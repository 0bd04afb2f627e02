"""Nodes: the state machine, connection, labels (user vs system) and the inventory."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest

from better_compute.compute import (
    SPOT_LABEL,
    cordon,
    mark_ready,
    record_heartbeat,
    register_node,
    retire,
    set_connected,
    set_system_label,
    uncordon,
    update_inventory,
)
from better_compute.compute.nodes import TRANSITIONS
from better_compute.core.errors import ComputeError

from .conftest import World


async def test_the_node_lifecycle_joining_ready_cordoned_retired(world: World) -> None:
    node = await world.node("n1", 2, ready=False)
    assert node.state == "joining"
    async with world.compute.nodes.transaction() as session:
        now = world.clock.now()
        assert (await mark_ready(session, node.id, now)).state == "ready"
        assert (await cordon(session, node.id, now, reason="test")).state == "cordoned"
        assert (await mark_ready(session, node.id, now)).state == "cordoned"  # reconnecting does not uncordon
        assert (await uncordon(session, node.id, now, reason="test")).state == "ready"
        assert (await cordon(session, node.id, now, reason="test")).state == "cordoned"
        assert (await cordon(session, node.id, now, reason="test")).state == "cordoned"  # repeating is a no-op
        assert (await retire(session, node.id, now, reason="test")).state == "retired"
        assert (await retire(session, node.id, now, reason="test")).state == "retired"


@pytest.mark.parametrize(
    ("start", "move"),
    [("retired", "mark_ready"), ("retired", "cordon"), ("retired", "uncordon"), ("joining", "uncordon")],
)
async def test_illegal_transitions_are_refused(world: World, start: str, move: str) -> None:
    node = await world.node("n1", 2, ready=False)
    moves = {
        "mark_ready": mark_ready,
        "cordon": functools.partial(cordon, reason="test"),
        "uncordon": functools.partial(uncordon, reason="test"),
    }
    if start == "retired":
        async with world.compute.nodes.transaction() as session:
            await retire(session, node.id, world.clock.now(), reason="test")
    with pytest.raises(ComputeError) as err:
        async with world.compute.nodes.transaction() as session:
            await moves[move](session, node.id, world.clock.now())
    assert (err.value.code, err.value.path) == ("INVALID_STATE", "/nodeId")
    assert (await world.compute.nodes.get(world.tenant.id, node.id)).state == start


def test_the_transition_table_has_no_way_back_to_joining_or_out_of_retired() -> None:
    assert TRANSITIONS["retired"] == frozenset()
    assert all("joining" not in targets for targets in TRANSITIONS.values())


async def test_a_node_holding_reservations_is_not_retired(world: World) -> None:
    node = await world.node("n1", 2)
    reservation = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    with pytest.raises(ComputeError) as err:
        async with world.compute.nodes.transaction() as session:
            await retire(session, node.id, world.clock.now(), reason="test")
    assert err.value.code == "INVALID_STATE"
    await world.compute.reservations.end(reservation.id, reason="test")
    async with world.compute.nodes.transaction() as session:
        assert (await retire(session, node.id, world.clock.now(), reason="test")).state == "retired"


async def test_registering_is_idempotent_on_pool_and_name(world: World) -> None:
    first = await world.node("n1", 2, ready=False)
    again = await world.node("n1", 2, ready=False)
    assert again.id == first.id
    assert [d.uuid for d in again.devices] == ["GPU-n1-0", "GPU-n1-1"]
    async with world.compute.nodes.transaction() as session:
        await retire(session, first.id, world.clock.now(), reason="test")
    replacement = await world.node("n1", 2, ready=False)
    assert replacement.id != first.id  # a retired node's name may join again, as a new node
    assert len(await world.compute.nodes.list(world.tenant.id, include_retired=True)) == 2


async def test_connection_and_last_seen_come_from_the_clock(world: World) -> None:
    node = await world.node("n1", 1)
    assert (node.connected, node.last_seen_at) == (False, None)
    async with world.compute.nodes.transaction() as session:
        await set_connected(session, node.id, True, world.clock.now())
    world.clock.advance(30)
    async with world.compute.nodes.transaction() as session:
        await record_heartbeat(session, node.id, world.clock.now())
    seen = await world.compute.nodes.get(world.tenant.id, node.id)
    assert seen.connected and seen.last_seen_at == world.clock.now()
    world.clock.advance(5)
    async with world.compute.nodes.transaction() as session:
        await set_connected(session, node.id, False, world.clock.now())
    gone = await world.compute.nodes.get(world.tenant.id, node.id)
    assert not gone.connected and gone.last_seen_at == seen.last_seen_at + timedelta(seconds=5)


async def test_system_labels_are_set_only_by_the_system(world: World) -> None:
    node = await world.node("n1", 1)
    with pytest.raises(ComputeError) as err:
        await world.compute.nodes.set_labels(world.tenant.id, node.id, {SPOT_LABEL: "spot"})
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/labels/bc.dev~1capacity")
    with pytest.raises(ComputeError):
        await world.compute.nodes.set_labels(world.tenant.id, node.id, {"better-compute.dev/substrate-pool": "x"})
    labelled = await world.compute.nodes.set_labels(world.tenant.id, node.id, {"team": "ml", "example.com/rack": "r1"})
    assert labelled.labels == {"team": "ml", "example.com/rack": "r1"} and labelled.system_labels == {}
    with pytest.raises(ComputeError) as err:
        async with world.compute.nodes.transaction() as session:
            await set_system_label(session, node.id, "team", "ml")
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/key")
    async with world.compute.nodes.transaction() as session:
        marked = await set_system_label(session, node.id, SPOT_LABEL, "spot")
    assert marked.spot and marked.labels == labelled.labels


async def test_the_inventory_os_section_names_the_kubernetes_node(world: World) -> None:
    node = await world.node("gke-pool-abc", 2)
    assert node.inventory["os"] == {"hostname": "gke-pool-abc.internal", "kubernetesNodeName": "gke-pool-abc"}
    assert node.kubernetes_node_name == "gke-pool-abc"
    async with world.compute.nodes.transaction() as session:
        older_bcd = await update_inventory(session, node.id, {"os": {"hostname": "ip-10-0-0-1"}}, world.clock.now())
    assert older_bcd.kubernetes_node_name == "ip-10-0-0-1"  # a bcd that does not report the Node name yet
    assert [d.present for d in older_bcd.devices] == [False, False]  # the GPUs went away: not bookable


async def test_a_node_with_a_competing_device_plugin_takes_no_booking_until_it_is_gone(world: World) -> None:
    node = await world.node("n1", 2)
    inventory = {**node.inventory, "competingDevicePlugins": ["nvidia-gpu.sock"]}
    async with world.compute.nodes.transaction() as session:
        held_out = await update_inventory(session, node.id, inventory, world.clock.now())
    assert held_out.competing_device_plugins == ("nvidia-gpu.sock",)
    assert [d.present for d in held_out.devices] == [False, False]
    async with world.compute.nodes.transaction() as session:
        clear = await update_inventory(session, node.id, node.inventory, world.clock.now())
    assert [d.present for d in clear.devices] == [True, True]


async def test_bad_inventories_are_refused_with_a_path_and_change_nothing(world: World) -> None:
    node = await world.node("n1", 1)
    bad = [
        ({"os": "linux"}, "/inventory/os"),
        ({"os": {"hostname": ""}}, "/inventory/os/hostname"),
        ({"gpus": {}}, "/inventory/gpus"),
        ({"gpus": [{"index": -1, "uuid": "u", "model": "m"}]}, "/inventory/gpus/0/index"),
        ({"gpus": [{"index": 0, "uuid": "", "model": "m"}]}, "/inventory/gpus/0/uuid"),
        (
            {"gpus": [{"index": 0, "uuid": "u", "model": "m"}, {"index": 0, "uuid": "v", "model": "m"}]},
            "/inventory/gpus/1/index",
        ),
        (
            {"gpus": [{"index": 0, "uuid": "u", "model": "m"}, {"index": 1, "uuid": "u", "model": "m"}]},
            "/inventory/gpus/1/uuid",
        ),
        ({"competingDevicePlugins": "nvidia-gpu.sock"}, "/inventory/competingDevicePlugins"),
        ({"competingDevicePlugins": [""]}, "/inventory/competingDevicePlugins/0"),
    ]
    for inventory, path in bad:
        with pytest.raises(ComputeError) as err:
            async with world.compute.nodes.transaction() as session:
                await update_inventory(session, node.id, inventory, world.clock.now())
        assert (err.value.code, err.value.path) == ("INVALID_INPUT", path)
    with pytest.raises(ComputeError) as err:
        async with world.compute.nodes.transaction() as session:
            await register_node(session, now=world.clock.now(), pool_id="pool_unknown", name="n2")
    assert (err.value.code, err.value.path) == ("NOT_FOUND", "/poolId")
    assert await world.compute.nodes.get(world.tenant.id, node.id) == node
    assert len(await world.compute.nodes.list(world.tenant.id)) == 1


async def test_another_tenant_cannot_see_or_cordon_a_node(world: World) -> None:
    node = await world.node("n1", 1)
    other = await world.iam.create_tenant("other")
    for call in (world.compute.nodes.get, world.compute.nodes.cordon):
        with pytest.raises(ComputeError) as err:
            await call(other.id, node.id)
        assert err.value.code == "NOT_FOUND"
    assert await world.compute.nodes.list(other.id) == []
    assert (await world.compute.nodes.get(world.tenant.id, node.id)).state == "ready"
