"""UpdateCluster and node-pool autoscaling through google-cloud-container's REST transport, as GKE takes them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.cloud import container_v1

from better_compute.core.clock import SimClock
from better_compute.testing.gke import GkeEmulator
from better_compute.testing.kube import KubeApiServer

PARENT = "projects/upd/locations/us-central1"
NAME = f"{PARENT}/clusters/upd"
POOL = f"{NAME}/nodePools/cpu"
OLD, NEW = "1.29.10-gke.1054000", "1.31.2-gke.1115000"

World = tuple[SimClock, GkeEmulator, container_v1.ClusterManagerClient]


@pytest.fixture
async def world() -> AsyncIterator[World]:
    """A RUNNING regional cluster `upd` at 1.29 with one node per zone in node pool `cpu`."""
    clock = SimClock()
    async with KubeApiServer(clock) as kube, GkeEmulator(clock, kube) as gke:
        client = container_v1.ClusterManagerClient(
            credentials=gke.google_credentials(), transport="rest", client_options=ClientOptions(api_endpoint=gke.url)
        )
        try:
            cluster = {
                "name": "upd",
                "initial_cluster_version": "1.29",
                "node_pools": [{"name": "cpu", "initial_node_count": 1, "config": {"machine_type": "e2-standard-4"}}],
            }
            await call(client.create_cluster, request={"parent": PARENT, "cluster": cluster})
            await advance((clock, gke, client), 300)
            yield clock, gke, client
        finally:
            client.transport.close()


async def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, **kwargs)


async def advance(world: World, seconds: float) -> None:
    clock, gke, _ = world
    clock.advance(seconds)
    await gke.settle()


async def update(world: World, **fields: Any) -> container_v1.Operation:
    return await call(world[2].update_cluster, request={"name": NAME, "update": fields})  # type: ignore[no-any-return]


async def test_desired_master_version_upgrades_the_master_and_leaves_the_nodes(world: World) -> None:
    client = world[2]
    op = await update(world, desired_master_version="1.31")
    assert op.operation_type == container_v1.Operation.Type.UPGRADE_MASTER
    assert (await call(client.get_cluster, request={"name": NAME})).status.name == "RECONCILING"
    await advance(world, 600)
    cluster = await call(client.get_cluster, request={"name": NAME})
    assert (cluster.status.name, cluster.current_master_version, cluster.current_node_version) == ("RUNNING", NEW, OLD)
    with pytest.raises(gexc.BadRequest, match="cannot be downgraded"):
        await update(world, desired_master_version="1.29")


async def test_desired_node_version_upgrades_one_pool_never_past_the_master(world: World) -> None:
    client = world[2]
    with pytest.raises(gexc.BadRequest, match="must not be newer than the master version"):
        await update(world, desired_node_pool_id="cpu", desired_node_version="1.31")
    await update(world, desired_master_version="1.31")
    await advance(world, 600)
    op = await update(world, desired_node_pool_id="cpu", desired_node_version="-")
    assert op.operation_type == container_v1.Operation.Type.UPGRADE_NODES
    assert (await call(client.get_node_pool, request={"name": POOL})).status.name == "RECONCILING"
    with pytest.raises(gexc.BadRequest, match="incompatible operation"):
        await update(world, desired_node_pool_id="cpu", desired_image_type="UBUNTU_CONTAINERD")
    await advance(world, 300)
    pool = await call(client.get_node_pool, request={"name": POOL})
    assert (pool.status.name, pool.version) == ("RUNNING", NEW)
    assert (await call(client.get_cluster, request={"name": NAME})).current_node_version == NEW
    await update(world, desired_node_pool_id="cpu", desired_image_type="UBUNTU_CONTAINERD")
    await advance(world, 300)
    assert (await call(client.get_node_pool, request={"name": POOL})).config.image_type == "UBUNTU_CONTAINERD"


async def test_desired_node_pool_autoscaling_sets_the_bounds_and_the_autoscaler_keeps_within_them(
    world: World,
) -> None:
    _, gke, client = world
    autoscaling = {"enabled": True, "min_node_count": 2, "max_node_count": 3}
    op = await update(world, desired_node_pool_id="cpu", desired_node_pool_autoscaling=autoscaling)
    assert op.operation_type == container_v1.Operation.Type.UPDATE_CLUSTER
    await advance(world, 300)
    pool = await call(client.get_node_pool, request={"name": POOL})
    assert (pool.autoscaling.enabled, pool.autoscaling.min_node_count, pool.autoscaling.max_node_count) == (True, 2, 3)
    assert pool.initial_node_count == 1
    assert await gke.autoscale("us-central1", "upd", "cpu", 7) == dict.fromkeys(pool.locations, 3)

    total = {"enabled": True, "total_min_node_count": 1, "total_max_node_count": 4, "location_policy": "ANY"}
    await call(client.set_node_pool_autoscaling, request={"name": POOL, "autoscaling": total})
    await advance(world, 60)
    pool = await call(client.get_node_pool, request={"name": POOL})
    assert pool.autoscaling.total_max_node_count == 4
    assert pool.autoscaling.location_policy == container_v1.NodePoolAutoscaling.LocationPolicy.ANY
    assert sum((await gke.autoscale("us-central1", "upd", "cpu", 7)).values()) == 4
    assert sum((await gke.autoscale("us-central1", "upd", "cpu", 0)).values()) == 1

    await call(client.set_node_pool_autoscaling, request={"name": POOL, "autoscaling": {"enabled": False}})
    await advance(world, 60)
    assert not (await call(client.get_node_pool, request={"name": POOL})).autoscaling.enabled


@pytest.mark.parametrize(
    ("autoscaling", "message"),
    [
        ({"enabled": True, "min_node_count": 3, "max_node_count": 1}, r"min_node_count \(3\) must be less than"),
        ({"enabled": True, "max_node_count": 0}, "max_node_count must be greater than 0"),
        (
            {"enabled": True, "max_node_count": 2, "total_max_node_count": 4},
            "per zone .* or in total .* not both",
        ),
    ],
)
async def test_bad_autoscaling_bounds_are_refused_and_change_nothing(
    world: World, autoscaling: dict[str, Any], message: str
) -> None:
    _, _, client = world
    with pytest.raises(gexc.BadRequest, match=message):
        await call(client.set_node_pool_autoscaling, request={"name": POOL, "autoscaling": autoscaling})
    with pytest.raises(gexc.BadRequest, match=message):
        await update(world, desired_node_pool_id="cpu", desired_node_pool_autoscaling=autoscaling)
    assert not (await call(client.get_node_pool, request={"name": POOL})).autoscaling.enabled


async def test_desired_locations_moves_the_cluster_and_its_pools_nodes(world: World) -> None:
    _, gke, client = world
    zones = ["us-central1-a", "us-central1-f"]
    op = await update(world, desired_locations=zones)
    assert op.operation_type == container_v1.Operation.Type.UPDATE_CLUSTER
    await advance(world, 300)
    cluster = await call(client.get_cluster, request={"name": NAME})
    assert list(cluster.locations) == zones and list(cluster.node_pools[0].locations) == zones
    assert len(cluster.node_pools[0].instance_group_urls) == 2
    nodes = gke.kube_cluster("us-central1", "upd").objects("Node")
    assert sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes) == zones
    with pytest.raises(gexc.BadRequest, match="is not a zone of region"):
        await update(world, desired_locations=["europe-west4-a"])


async def test_an_update_sets_exactly_one_known_field(world: World) -> None:
    _, _, client = world
    with pytest.raises(gexc.BadRequest, match="Must specify a field to update"):
        await update(world)
    with pytest.raises(gexc.BadRequest, match="Only one update can be applied at a time"):
        await update(world, desired_master_version="1.31", desired_locations=["us-central1-a"])
    with pytest.raises(gexc.BadRequest, match=r"update\.desiredLoggingService.* not supported"):
        await update(world, desired_logging_service="none")
    with pytest.raises(gexc.BadRequest, match="desiredNodePoolId"):
        await update(world, desired_node_version="-")
    with pytest.raises(gexc.NotFound):
        await update(world, desired_node_pool_id="none", desired_node_version="-")
    with pytest.raises(gexc.NotFound):
        await call(
            client.update_cluster, request={"name": f"{PARENT}/clusters/nope", "update": {"desired_node_version": "-"}}
        )


async def test_update_node_pool_moves_the_node_version_and_image_and_refuses_what_it_does_not_model(
    world: World,
) -> None:
    client = world[2]
    await update(world, desired_master_version="1.31")
    await advance(world, 600)
    op = await call(
        client.update_node_pool, request={"name": POOL, "node_version": "-", "image_type": "UBUNTU_CONTAINERD"}
    )
    assert op.operation_type == container_v1.Operation.Type.UPGRADE_NODES
    await advance(world, 300)
    pool = await call(client.get_node_pool, request={"name": POOL})
    assert (pool.version, pool.config.image_type, pool.status.name) == (NEW, "UBUNTU_CONTAINERD", "RUNNING")
    with pytest.raises(gexc.BadRequest, match=r"machineType.* not supported"):
        await call(
            client.update_node_pool, request={"name": POOL, "node_version": "-", "machine_type": "n2-standard-8"}
        )
    with pytest.raises(gexc.BadRequest, match="Image type"):
        await call(client.update_node_pool, request={"name": POOL, "node_version": "-", "image_type": "WINDOWS_LTSC"})
    assert (await call(client.get_node_pool, request={"name": POOL})).status.name == "RUNNING", (
        "refusals change nothing"
    )
    with pytest.raises(gexc.NotFound):
        await call(client.update_node_pool, request={"name": f"{NAME}/nodePools/none", "node_version": "-"})


async def test_a_pool_created_outside_its_autoscaling_bounds_is_brought_within_them(world: World) -> None:
    _, gke, client = world
    pool = {
        "name": "auto",
        "initial_node_count": 0,
        "config": {"machine_type": "e2-standard-4"},
        "autoscaling": {"enabled": True, "min_node_count": 2, "max_node_count": 5},
    }
    await call(client.create_node_pool, request={"parent": NAME, "node_pool": pool})
    await advance(world, 120)
    made = await call(client.get_node_pool, request={"name": f"{NAME}/nodePools/auto"})
    assert made.initial_node_count == 0
    nodes = gke.kube_cluster("us-central1", "upd").objects("Node", labels={"cloud.google.com/gke-nodepool": "auto"})
    assert len(nodes) == 2 * len(made.locations)
