"""Named nodes leave a DOKS node pool through pydo's delete_node (`DELETE .../nodes/{node id}`).

A DOKS Node carries `spec.providerID: digitalocean://<droplet id>`; the driver maps the droplet to
the pool's node id. `replace=1`: the node is drained, deleted and a new one (a new droplet, a new
name) made; without it the pool's count is one lower.
"""

from __future__ import annotations

from typing import Any

import pytest
from doks_world import World
from test_doks_driver import _ready

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import Autoscaling, NodePoolSpec

POOL = NodePoolSpec("cpus", "s-2vcpu-4gb", 2)


async def two_nodes(world: World, spec: NodePoolSpec = POOL) -> tuple[str, list[dict[str, Any]]]:
    cid = (await _ready(world)).cluster_id
    await world.driver.ensure_node_pool(world.account(), cid, spec)
    await world.advance(world.doks.timings.node_provisioning)
    return cid, nodes(world, cid)


def nodes(world: World, cid: str) -> list[dict[str, Any]]:
    found = world.doks.clusters[cid].kube.objects("Node", labels={"doks.digitalocean.com/node-pool": "cpus"})
    return sorted(found, key=lambda n: n["metadata"]["name"])


def pool(world: World, cid: str) -> Any:
    return next(p for p in world.doks.clusters[cid].pools if p.name == "cpus")


async def test_a_doks_node_carries_its_droplet_as_its_provider_id(world: World) -> None:
    cid, found = await two_nodes(world)
    droplets = {n.droplet_id for n in pool(world, cid).nodes}
    assert {n["spec"]["providerID"] for n in found} == {f"digitalocean://{d}" for d in droplets}


async def test_replacing_a_node_drains_and_deletes_it_and_makes_a_new_one(world: World) -> None:
    cid, (first, second) = await two_nodes(world)
    timings = world.doks.timings

    await world.driver.remove_machines(world.account(), cid, "cpus", (first["spec"]["providerID"],), replace=True)

    assert pool(world, cid).count == 2
    assert any(method == "DELETE" and "/nodes/" in path for method, path in world.doks.requests)
    # asked again (a retry after a crash): the node is draining already, and is skipped
    await world.driver.remove_machines(world.account(), cid, "cpus", (first["spec"]["providerID"],), replace=True)
    assert len([n for n in pool(world, cid).nodes if n.state == "draining"]) == 1
    await world.advance(timings.node_drain + timings.node_deletion)
    assert [n["metadata"]["name"] for n in nodes(world, cid)] == [second["metadata"]["name"]]
    await world.advance(timings.node_provisioning - timings.node_drain - timings.node_deletion)
    names = {n["metadata"]["name"] for n in nodes(world, cid)}
    assert first["metadata"]["name"] not in names and len(names) == 2
    state = await world.driver.get_node_pool(world.account(), cid, "cpus")
    assert state is not None and state.node_count == 2


async def test_removing_a_node_lowers_the_count_by_one(world: World) -> None:
    cid, (first, second) = await two_nodes(world)

    await world.driver.remove_machines(world.account(), cid, "cpus", (first["spec"]["providerID"],), replace=False)

    state = await world.driver.get_node_pool(world.account(), cid, "cpus")
    assert state is not None and state.node_count == 1
    await world.advance(world.doks.timings.node_drain + world.doks.timings.node_deletion)
    assert [n["metadata"]["name"] for n in nodes(world, cid)] == [second["metadata"]["name"]]


async def test_the_last_node_of_a_fixed_pool_or_one_at_an_autoscaled_minimum_stays(world: World) -> None:
    cid, (first, _) = await two_nodes(world, NodePoolSpec("cpus", "s-2vcpu-4gb", 2, autoscaling=Autoscaling(2, 3)))
    with pytest.raises(ComputeError) as caught:
        await world.driver.remove_machines(world.account(), cid, "cpus", (first["spec"]["providerID"],), replace=False)
    assert caught.value.code is ErrorCode.INVALID_STATE and "min_nodes" in str(caught.value)
    assert pool(world, cid).count == 2 and len(nodes(world, cid)) == 2


async def test_a_providerid_that_is_not_a_droplet_is_refused_and_a_missing_pool_is_not_found(world: World) -> None:
    cid, (first, _) = await two_nodes(world)
    with pytest.raises(ComputeError) as caught:
        await world.driver.remove_machines(world.account(), cid, "cpus", ("aws:///us-east-1a/i-0abc",), replace=True)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    with pytest.raises(ComputeError) as caught:
        await world.driver.remove_machines(world.account(), cid, "nope", (first["spec"]["providerID"],), replace=True)
    assert caught.value.code is ErrorCode.NOT_FOUND
    assert pool(world, cid).count == 2
