"""The GKE emulator speaks container.googleapis.com v1 as google-cloud-container's REST transport expects.

Raw HTTP checks the wire (camelCase, int64 as strings, enums by name, the google.rpc.Status envelope);
the SDK itself, in a thread, parses every kind of response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.cloud import compute_v1, container_v1

from better_compute.core.clock import SimClock
from better_compute.testing.gke import GkeEmulator, SeedPool
from better_compute.testing.kube import KubeApiServer

PARENT = "projects/wire/locations/us-central1"


@pytest.fixture
async def world() -> AsyncIterator[tuple[SimClock, GkeEmulator, container_v1.ClusterManagerClient, str]]:
    clock = SimClock()
    async with KubeApiServer(clock) as kube, GkeEmulator(clock, kube) as gke:
        client = container_v1.ClusterManagerClient(
            credentials=gke.google_credentials(), transport="rest", client_options=ClientOptions(api_endpoint=gke.url)
        )
        try:
            credentials = gke.google_credentials()
            await asyncio.to_thread(_refresh, credentials)
            yield clock, gke, client, str(credentials.token)
        finally:
            client.transport.close()


def _refresh(credentials: Any) -> None:
    import google.auth.transport.requests
    import requests

    with requests.Session() as session:
        credentials.refresh(google.auth.transport.requests.Request(session=session))


async def advance(clock: SimClock, gke: GkeEmulator, seconds: float) -> None:
    clock.advance(seconds)
    await gke.settle()


CLUSTER = {
    "name": "wire",
    "node_pools": [
        {
            "name": "gpu",
            "initial_node_count": 1,
            "config": {"machine_type": "a3-highgpu-8g", "accelerators": [{"accelerator_type": "nvidia-h100-80gb"}]},
        }
    ],
}


async def test_an_operation_goes_pending_running_done(world: Any) -> None:
    clock, gke, client, _ = world
    op = await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    assert op.status == container_v1.Operation.Status.PENDING
    assert op.operation_type == container_v1.Operation.Type.CREATE_CLUSTER
    assert op.target_link.endswith("/locations/us-central1/clusters/wire")
    assert op.self_link.endswith(f"/locations/us-central1/operations/{op.name}")
    name = f"{PARENT}/operations/{op.name}"
    await gke.settle()
    running = await asyncio.to_thread(client.get_operation, request={"name": name})
    assert running.status == container_v1.Operation.Status.RUNNING
    await advance(clock, gke, 299)
    assert (await asyncio.to_thread(client.get_operation, request={"name": name})).status.name == "RUNNING"
    await advance(clock, gke, 1)
    done = await asyncio.to_thread(client.get_operation, request={"name": name})
    assert done.status == container_v1.Operation.Status.DONE and done.end_time and not done.error.code
    cluster = await asyncio.to_thread(client.get_cluster, request={"name": f"{PARENT}/clusters/wire"})
    assert cluster.status == container_v1.Cluster.Status.RUNNING
    assert cluster.locations == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert cluster.node_pools[0].config.accelerators[0].accelerator_count == 8
    assert cluster.self_link.startswith("https://container.googleapis.com/v1/projects/")
    assert cluster.endpoint and cluster.master_auth.cluster_ca_certificate


async def test_the_wire_is_proto3_json(world: Any) -> None:
    clock, gke, client, token = world
    await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    await advance(clock, gke, 300)
    async with httpx.AsyncClient(base_url=gke.url, headers={"Authorization": f"Bearer {token}"}) as http:
        pool = (await http.get(f"/v1/{PARENT}/clusters/wire/nodePools/gpu")).json()
        assert pool["config"]["accelerators"] == [{"acceleratorCount": "8", "acceleratorType": "nvidia-h100-80gb"}]
        assert pool["initialNodeCount"] == 1 and pool["status"] == "RUNNING"
        missing = await http.get(f"/v1/{PARENT}/clusters/nope")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": {
                "code": 404,
                "message": f"Not found: {PARENT}/clusters/nope.",
                "status": "NOT_FOUND",
                "details": [],
            }
        }
        gke.faults.throttle = 1
        throttled = await http.get(f"/v1/{PARENT}/clusters/wire")
        assert throttled.status_code == 429 and throttled.headers["retry-after"] == "30"
        assert throttled.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"} in throttled.json()["error"][
            "details"
        ]
    async with httpx.AsyncClient(base_url=gke.url, headers={"Authorization": "Bearer forged"}) as http:
        refused = await http.get(f"/v1/{PARENT}/clusters/wire")
        assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"


async def test_the_sdk_parses_every_kind_of_answer(world: Any) -> None:
    clock, gke, client, _ = world
    config = await asyncio.to_thread(client.get_server_config, request={"name": PARENT})
    assert config.default_cluster_version in config.valid_master_versions
    await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    await advance(clock, gke, 300)
    clusters = await asyncio.to_thread(client.list_clusters, request={"parent": PARENT})
    assert [c.name for c in clusters.clusters] == ["wire"]
    pools = await asyncio.to_thread(client.list_node_pools, request={"parent": f"{PARENT}/clusters/wire"})
    assert [p.name for p in pools.node_pools] == ["gpu"]
    ops = await asyncio.to_thread(client.list_operations, request={"parent": PARENT})
    assert [o.operation_type.name for o in ops.operations] == ["CREATE_CLUSTER"]
    op = await asyncio.to_thread(
        client.set_node_pool_size, request={"name": f"{PARENT}/clusters/wire/nodePools/gpu", "node_count": 0}
    )
    assert op.operation_type == container_v1.Operation.Type.SET_NODE_POOL_SIZE
    with pytest.raises(gexc.Conflict, match="Already exists"):
        await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    with pytest.raises(gexc.NotFound):
        await asyncio.to_thread(client.get_node_pool, request={"name": f"{PARENT}/clusters/wire/nodePools/none"})
    with pytest.raises(gexc.BadRequest, match="Invalid machine type"):
        await asyncio.to_thread(
            client.create_node_pool,
            request={
                "parent": f"{PARENT}/clusters/wire",
                "node_pool": {"name": "bad", "config": {"machine_type": "x9-huge"}},
            },
        )


async def test_a_stockout_reads_as_a_failed_pool_with_its_condition(world: Any) -> None:
    clock, gke, client, _ = world
    await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    await advance(clock, gke, 300)
    gke.faults.stockout.add("g2-standard-4")
    await asyncio.to_thread(
        client.create_node_pool,
        request={
            "parent": f"{PARENT}/clusters/wire",
            "node_pool": {"name": "l4", "initial_node_count": 1, "config": {"machine_type": "g2-standard-4"}},
        },
    )
    await advance(clock, gke, 120)
    pool = await asyncio.to_thread(client.get_node_pool, request={"name": f"{PARENT}/clusters/wire/nodePools/l4"})
    assert pool.status == container_v1.NodePool.Status.ERROR
    assert pool.conditions[0].code == container_v1.StatusCondition.Code.GCE_STOCKOUT


async def test_minted_tokens_are_issued_and_accepted_by_the_clusters_api_server(world: Any) -> None:
    _, gke, _, token = world
    assert token in gke.issued
    await gke.seed_cluster("seeded", project="wire", pools=(SeedPool("default-pool", node_count=1),))
    kube = gke.kube_cluster("us-central1", "seeded")
    async with httpx.AsyncClient(verify=False) as http:
        accepted = await http.get(f"{kube.endpoint}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
        refused = await http.get(f"{kube.endpoint}/api/v1/nodes", headers={"Authorization": "Bearer ya29.forged"})
    assert accepted.status_code == 200 and len(accepted.json()["items"]) == 3
    assert refused.status_code == 401


def _groups_client(gke: GkeEmulator) -> compute_v1.InstanceGroupManagersClient:
    return compute_v1.InstanceGroupManagersClient(
        credentials=gke.google_credentials(), transport="rest", client_options=ClientOptions(api_endpoint=gke.url)
    )


async def _target_sizes(groups: compute_v1.InstanceGroupManagersClient, urls: list[str]) -> list[int]:
    sizes = []
    for url in urls:
        parts = url.split("/")
        group = await asyncio.to_thread(groups.get, project=parts[-5], zone=parts[-3], instance_group_manager=parts[-1])
        assert group.self_link == url and group.base_instance_name == parts[-1].removesuffix("-grp")
        sizes.append(group.target_size)
    return sizes


async def test_a_resize_moves_the_instance_groups_target_size_and_leaves_initial_node_count(world: Any) -> None:
    clock, gke, client, _ = world
    await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    await advance(clock, gke, 300)
    pool_name = f"{PARENT}/clusters/wire/nodePools/gpu"
    pool = await asyncio.to_thread(client.get_node_pool, request={"name": pool_name})
    urls = list(pool.instance_group_urls)
    assert len(urls) == 3
    assert all(
        url.startswith(f"https://www.googleapis.com/compute/v1/projects/wire/zones/{zone}/instanceGroupManagers/gke-")
        and url.endswith("-grp")
        for url, zone in zip(urls, ["us-central1-a", "us-central1-b", "us-central1-c"], strict=True)
    )
    groups = _groups_client(gke)
    try:
        assert await _target_sizes(groups, urls) == [1, 1, 1]
        await asyncio.to_thread(client.set_node_pool_size, request={"name": pool_name, "node_count": 3})
        await advance(clock, gke, 60)
        pool = await asyncio.to_thread(client.get_node_pool, request={"name": pool_name})
        assert pool.initial_node_count == 1
        assert await _target_sizes(groups, list(pool.instance_group_urls)) == [3, 3, 3]
        kube = gke.kube_cluster("us-central1", "wire", "wire")
        assert len(kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "gpu"})) == 9

        with pytest.raises(gexc.NotFound, match="was not found"):
            await asyncio.to_thread(
                groups.get, project="wire", zone="us-central1-a", instance_group_manager="gke-none-grp"
            )
    finally:
        groups.transport.close()
    async with httpx.AsyncClient(base_url=gke.url, headers={"Authorization": "Bearer forged"}) as http:
        refused = await http.get(urls[0].removeprefix("https://www.googleapis.com"))
        assert refused.status_code == 401 and refused.json()["error"]["errors"][0]["reason"] == "authError"


async def test_the_autoscaler_moves_target_size_within_the_bounds(world: Any) -> None:
    clock, gke, client, _ = world
    await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": CLUSTER})
    await advance(clock, gke, 300)
    pool_name = f"{PARENT}/clusters/wire/nodePools/gpu"
    await asyncio.to_thread(
        client.set_node_pool_autoscaling,
        request={"name": pool_name, "autoscaling": {"enabled": True, "min_node_count": 2, "max_node_count": 4}},
    )
    await advance(clock, gke, 60)
    pool = await asyncio.to_thread(client.get_node_pool, request={"name": pool_name})
    assert pool.autoscaling.enabled and pool.initial_node_count == 1
    groups = _groups_client(gke)
    try:
        assert await _target_sizes(groups, list(pool.instance_group_urls)) == [2, 2, 2]
        assert await gke.autoscale("us-central1", "wire", "gpu", 9) == dict.fromkeys(pool.locations, 4)
        assert await _target_sizes(groups, list(pool.instance_group_urls)) == [4, 4, 4]
        await gke.autoscale("us-central1", "wire", "gpu", 0)
        assert await _target_sizes(groups, list(pool.instance_group_urls)) == [2, 2, 2]
    finally:
        groups.transport.close()


async def test_resource_labels_are_refused_as_gcp_refuses_them(world: Any) -> None:
    """GCP's label rules: lower-case letters, digits, '_' and '-' only, a key starting with a letter,
    at most 63 characters; better-compute's marks, rewritten by the driver, pass."""
    _, _, client, _ = world
    for labels in ({"better-compute.dev/deployment": "x"}, {"k": "Upper"}, {"1k": "v"}, {"k": "v" * 64}):
        cluster = {**CLUSTER, "name": "labelled", "resource_labels": labels}
        with pytest.raises(gexc.BadRequest, match="resource_labels"):
            await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": cluster})
    marks = {"better-compute-dev-substrate-pool": "pool_x1", "better-compute-dev-deployment": "0123456789abcdef"}
    cluster = {**CLUSTER, "name": "labelled", "resource_labels": marks}
    await asyncio.to_thread(client.create_cluster, request={"parent": PARENT, "cluster": cluster})
