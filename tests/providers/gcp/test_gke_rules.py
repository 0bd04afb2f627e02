"""GKE's rules from the spec's "Provider differences" table, against the emulator.

- Cluster location: a region or a zone.
- A flavor's `nodes` counts per zone: the flavor's zones, else the cluster's default node zones
  (three for a regional cluster, the one zone of a zonal cluster, the account's zones when it names them).
- `nodes: 0` is allowed; zones and disk are taken; Spot node pools exist.
- Kubernetes Node names are the VM hostnames: gke-<cluster>-<pool>-<8 hex>-<4 chars>.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from gke_world import PROJECT, Gke, account

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import (
    Accelerators,
    Autoscaling,
    ClusterSpec,
    ClusterStatus,
    NodePoolSpec,
    NodePoolStatus,
    Taint,
)


async def ready_cluster(gke: Gke, location: str, name: str = "rules", config: dict[str, object] | None = None) -> str:
    acct = account(config) if config else gke.account
    state = await gke.driver.ensure_cluster(acct, ClusterSpec(name=name, location=location))
    await gke.advance(300)
    ready = await gke.driver.get_cluster(acct, state.cluster_id)
    assert ready is not None and ready.status == ClusterStatus.READY
    return state.cluster_id


async def ready_pool(gke: Gke, cluster_id: str, spec: NodePoolSpec) -> None:
    await gke.driver.ensure_node_pool(gke.account, cluster_id, spec)
    await gke.advance(120)
    state = await gke.driver.get_node_pool(gke.account, cluster_id, spec.name)
    assert state is not None and state.status == NodePoolStatus.READY


def nodes_of(gke: Gke, location: str, name: str, pool: str) -> list[dict[str, Any]]:
    kube = gke.emulator.kube_cluster(location, name)
    return kube.objects("Node", labels={"cloud.google.com/gke-nodepool": pool})


async def test_a_regional_cluster_puts_nodes_in_three_zones_so_nodes_counts_per_zone(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1")
    await ready_pool(gke, cluster_id, NodePoolSpec(name="cpu", machine_type="e2-standard-4", node_count=2))

    nodes = nodes_of(gke, "us-central1", "rules", "cpu")
    zones = sorted({n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes})
    assert zones == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert len(nodes) == 6
    assert gke.driver.zone_count(gke.account, ()) == 3
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "cpu")
    assert state is not None and state.node_count == 2 and len(state.zones) == 3


async def test_a_zonal_cluster_has_one_node_zone(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-b")
    state = await gke.driver.get_cluster(gke.account, cluster_id)
    assert state is not None and state.outputs is not None and state.outputs.location == "us-central1-b"
    await ready_pool(gke, cluster_id, NodePoolSpec(name="cpu", machine_type="e2-standard-4", node_count=2))
    assert len(nodes_of(gke, "us-central1-b", "rules", "cpu")) == 2


async def test_the_accounts_zones_are_the_clusters_node_zones(gke: Gke) -> None:
    config = {"projectId": PROJECT, "zones": ["us-central1-a"]}
    cluster_id = await ready_cluster(gke, "us-central1", config=config)
    await ready_pool(gke, cluster_id, NodePoolSpec(name="cpu", machine_type="e2-standard-4", node_count=2))
    assert len(nodes_of(gke, "us-central1", "rules", "cpu")) == 2
    assert gke.driver.zone_count(account(config), ()) == 1


async def test_a_flavors_zones_override_the_clusters(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1")
    zones = ("us-central1-a", "us-central1-f")
    await ready_pool(gke, cluster_id, NodePoolSpec(name="two", machine_type="e2-standard-4", node_count=1, zones=zones))
    nodes = nodes_of(gke, "us-central1", "rules", "two")
    assert sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes) == list(zones)
    assert gke.driver.zone_count(gke.account, zones) == 2


async def test_a_location_that_is_neither_region_nor_zone_is_refused(gke: Gke) -> None:
    with pytest.raises(ComputeError) as refused:
        await gke.driver.ensure_cluster(gke.account, ClusterSpec(name="nowhere", location="mars-north1"))
    assert refused.value.code == ErrorCode.INVALID_INPUT


async def test_nodes_are_named_like_gke_vm_hostnames_and_carry_the_pools_labels_and_gpus(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-a", name="fleet")
    spec = NodePoolSpec(
        name="bc-h100",
        machine_type="a3-highgpu-8g",
        node_count=2,
        labels={"better-compute.dev/substrate-pool": "pool_abc", "better-compute.dev/capacity": "spot"},
        accelerators=Accelerators("nvidia-h100-80gb", 8),
        spot=True,
        disk_gib=200,
        taints=(Taint("dedicated", "gpu", "NoSchedule"),),
    )
    await ready_pool(gke, cluster_id, spec)

    nodes = nodes_of(gke, "us-central1-a", "fleet", "bc-h100")
    assert len(nodes) == 2
    for node in nodes:
        name = node["metadata"]["name"]
        assert re.fullmatch(r"gke-fleet-bc-h100-[0-9a-f]{8}-[a-z0-9]{4}", name), name
        labels = node["metadata"]["labels"]
        assert labels["better-compute.dev/substrate-pool"] == "pool_abc"
        assert labels["better-compute.dev/capacity"] == "spot"
        assert labels["cloud.google.com/gke-nodepool"] == "bc-h100"
        assert labels["cloud.google.com/gke-spot"] == "true"
        assert labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
        gpus = gke.emulator.kube_cluster("us-central1-a", "fleet").kubelet.gpus(name)
        assert gpus is not None and gpus.count == 8
        assert {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"} in node["spec"]["taints"]
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "bc-h100")
    assert state is not None and state.spot and state.accelerators == Accelerators("nvidia-h100-80gb", 8)
    assert (
        gke.emulator.clusters[f"projects/{PROJECT}/locations/us-central1-a/clusters/fleet"]
        .node_pools["bc-h100"]
        .disk_size_gb
        == 200
    )


async def test_long_names_are_cut_to_fit_a_hostname(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-a", name="a-cluster-with-a-rather-long-name-xyz")
    await ready_pool(
        gke, cluster_id, NodePoolSpec(name="bc-abcdef-h100-flavor", machine_type="e2-standard-4", node_count=1)
    )
    (node,) = nodes_of(gke, "us-central1-a", "a-cluster-with-a-rather-long-name-xyz", "bc-abcdef-h100-flavor")
    name = node["metadata"]["name"]
    assert len(name) <= 63 and re.fullmatch(
        r"gke-a-cluster-with-a-bc-abcdef-h100-flav-[0-9a-f]{8}-[a-z0-9]{4}", name
    ), name


async def test_zero_nodes_is_a_node_pool_without_nodes(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1")
    await ready_pool(gke, cluster_id, NodePoolSpec(name="empty", machine_type="e2-standard-4", node_count=0))
    assert nodes_of(gke, "us-central1", "rules", "empty") == []
    await gke.driver.resize_node_pool(gke.account, cluster_id, "empty", 1)
    await gke.advance(60)
    assert len(nodes_of(gke, "us-central1", "rules", "empty")) == 3
    await gke.driver.resize_node_pool(gke.account, cluster_id, "empty", 0)
    await gke.advance(60)
    assert nodes_of(gke, "us-central1", "rules", "empty") == []


async def test_autoscaling_is_set_at_creation_and_changed_in_place(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-a")
    spec = NodePoolSpec(name="auto", machine_type="e2-standard-4", node_count=1, autoscaling=Autoscaling(0, 3))
    await ready_pool(gke, cluster_id, spec)
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "auto")
    assert state is not None and state.autoscaling == Autoscaling(0, 3)

    await gke.driver.resize_node_pool(gke.account, cluster_id, "auto", 1, Autoscaling(1, 5))
    await gke.advance(60)
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "auto")
    assert state is not None and state.autoscaling == Autoscaling(1, 5)

    await gke.driver.resize_node_pool(gke.account, cluster_id, "auto", 2)
    await gke.advance(60)
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "auto")
    assert state is not None and state.autoscaling is None


async def test_an_upgrade_moves_the_master_in_place_and_keeps_the_node_version(gke: Gke) -> None:
    state = await gke.driver.ensure_cluster(gke.account, ClusterSpec(name="up", location="us-east1", version="1.29"))
    await gke.advance(300)
    before = await gke.driver.get_cluster(gke.account, state.cluster_id)
    assert before is not None and before.outputs is not None
    assert before.outputs.version.startswith("1.29.") and before.outputs.node_version == before.outputs.version

    upgrading = await gke.driver.upgrade_cluster(gke.account, state.cluster_id, "1.31")
    assert upgrading.status == ClusterStatus.UPDATING
    await gke.advance(600)
    after = await gke.driver.get_cluster(gke.account, state.cluster_id)
    assert after is not None and after.outputs is not None and after.status == ClusterStatus.READY
    assert after.outputs.version.startswith("1.31.")
    assert after.outputs.node_version == before.outputs.version
    assert after.outputs.global_id == before.outputs.global_id
    with pytest.raises(ComputeError) as refused:
        await gke.driver.upgrade_cluster(gke.account, state.cluster_id, "1.29")
    assert refused.value.code == ErrorCode.INVALID_INPUT and "cannot be downgraded" in refused.value.message


async def test_a_resized_pool_reads_back_its_instance_groups_size_while_initial_node_count_stays(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1")
    await ready_pool(gke, cluster_id, NodePoolSpec(name="grow", machine_type="e2-standard-4", node_count=1))
    await gke.driver.resize_node_pool(gke.account, cluster_id, "grow", 3)
    await gke.advance(60)

    state = await gke.driver.get_node_pool(gke.account, cluster_id, "grow")
    assert state is not None and state.node_count == 3
    pool = gke.emulator.clusters[f"projects/{PROJECT}/locations/us-central1/clusters/rules"].node_pools["grow"]
    assert pool.to_json()["initialNodeCount"] == 1
    reads = [path for method, path in gke.emulator.requests if path.startswith("compute/v1/")]
    assert reads and all("/instanceGroupManagers/gke-rules-grow-" in path for path in reads)
    again = await gke.driver.resize_node_pool(gke.account, cluster_id, "grow", 3)
    assert again.node_count == 3
    assert [m for m, p in gke.emulator.requests if p.endswith(":setSize")] == ["POST"]


async def test_an_autoscaled_pool_reads_back_the_size_the_autoscaler_chose(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-a")
    spec = NodePoolSpec(name="auto", machine_type="e2-standard-4", node_count=1, autoscaling=Autoscaling(1, 4))
    await ready_pool(gke, cluster_id, spec)
    await gke.emulator.autoscale("us-central1-a", "rules", "auto", 6)
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "auto")
    assert state is not None and state.node_count == 4 and state.autoscaling == Autoscaling(1, 4)
    assert len(nodes_of(gke, "us-central1-a", "rules", "auto")) == 4
