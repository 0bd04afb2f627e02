"""EKS node groups as the driver makes them: `nodes` counts per Availability Zone of
the account's subnets, GPU instance types get the NVIDIA AMI, Spot is Spot capacity,
and a node group never changes shape."""

from __future__ import annotations

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import (
    Accelerators,
    Autoscaling,
    ClusterSpec,
    NodePoolSpec,
    NodePoolStatus,
    Taint,
)
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.vps.provider import ProviderAccount


@pytest.fixture
async def cluster_id(eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock) -> str:
    state = await driver.ensure_cluster(account, ClusterSpec("pools", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    return state.cluster_id


async def _provision(eks: EksEmulator, clock: SimClock, seconds: float) -> None:
    clock.advance(seconds)
    await eks.settle()


def _nodes(eks: EksEmulator, group: str) -> list[dict[str, object]]:
    cluster = eks.cluster("pools")
    assert cluster is not None and cluster.kube is not None
    return [n for n in cluster.kube.objects("Node") if n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == group]


async def test_two_subnets_in_two_zones_double_nodes(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock, cluster_id: str
) -> None:
    spec = NodePoolSpec(
        "h100",
        "p5.48xlarge",
        2,
        labels={"better-compute.dev/substrate-pool": "pool_1"},
        accelerators=Accelerators("nvidia-h100", 8),
    )
    made = await driver.ensure_node_pool(account, cluster_id, spec)
    assert made.status == NodePoolStatus.PROVISIONING
    assert driver.zone_count(account, ()) == 2
    group = eks.cluster("pools").nodegroups["h100"]  # type: ignore[union-attr]
    assert (group.min_size, group.desired_size, group.max_size) == (4, 4, 4), "desiredSize = nodes x zones"
    assert group.ami_type == "AL2023_x86_64_NVIDIA"
    await _provision(eks, clock, Timings().nodegroup_create)
    nodes = _nodes(eks, "h100")
    assert len(nodes) == 4
    per_zone = sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes)  # type: ignore[index]
    assert per_zone == ["us-east-1a", "us-east-1a", "us-east-1b", "us-east-1b"]
    state = await driver.get_node_pool(account, cluster_id, "h100")
    assert state is not None
    assert (state.status, state.node_count, state.zones) == (NodePoolStatus.READY, 2, ("us-east-1a", "us-east-1b"))
    assert state.accelerators == Accelerators("nvidia-h100", 8)
    kube = eks.cluster("pools").kube  # type: ignore[union-attr]
    assert kube is not None
    assert all(getattr(kube.kubelet.gpus(n["metadata"]["name"]), "count", 0) == 8 for n in nodes)  # type: ignore[index]

    resized = await driver.resize_node_pool(account, cluster_id, "h100", 3)
    assert resized.status == NodePoolStatus.UPDATING
    await _provision(eks, clock, Timings().nodegroup_update)
    assert len(_nodes(eks, "h100")) == 6
    assert (await driver.get_node_pool(account, cluster_id, "h100")).node_count == 3  # type: ignore[union-attr]


async def test_a_flavor_pinned_to_one_zone_uses_that_zones_subnets(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock, cluster_id: str
) -> None:
    spec = NodePoolSpec("l4", "g6.xlarge", 2, zones=("us-east-1b",), disk_gib=200)
    await driver.ensure_node_pool(account, cluster_id, spec)
    assert driver.zone_count(account, ("us-east-1b",)) == 1
    group = eks.cluster("pools").nodegroups["l4"]  # type: ignore[union-attr]
    assert group.subnets == ["subnet-0000000000000000b"]
    assert group.disk_size == 200
    await _provision(eks, clock, Timings().nodegroup_create)
    zones = [n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in _nodes(eks, "l4")]  # type: ignore[index]
    assert zones == ["us-east-1b", "us-east-1b"]
    with pytest.raises(ComputeError) as caught:
        await driver.ensure_node_pool(account, cluster_id, NodePoolSpec("c", "m7i.large", 1, zones=("us-east-1c",)))
    assert caught.value.code is ErrorCode.INVALID_INPUT


async def test_spot_labels_taints_and_autoscaling_reach_the_node_group(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock, cluster_id: str
) -> None:
    spec = NodePoolSpec(
        "spot",
        "m7i.large",
        1,
        labels={"better-compute.dev/capacity": "spot"},
        taints=(Taint("dedicated", "bc", "NoSchedule"),),
        spot=True,
        autoscaling=Autoscaling(0, 3),
    )
    await driver.ensure_node_pool(account, cluster_id, spec)
    group = eks.cluster("pools").nodegroups["spot"]  # type: ignore[union-attr]
    assert group.capacity_type == "SPOT"
    assert group.ami_type == "AL2023_x86_64_STANDARD"
    assert group.taints == [{"key": "dedicated", "value": "bc", "effect": "NO_SCHEDULE"}]
    assert (group.min_size, group.desired_size, group.max_size) == (0, 2, 6)
    await _provision(eks, clock, Timings().nodegroup_create)
    for node in _nodes(eks, "spot"):
        assert node["metadata"]["labels"]["eks.amazonaws.com/capacityType"] == "SPOT"  # type: ignore[index]
        assert node["metadata"]["labels"]["better-compute.dev/capacity"] == "spot"  # type: ignore[index]
        assert node["spec"]["taints"] == [{"key": "dedicated", "value": "bc", "effect": "NoSchedule"}]  # type: ignore[index]
    state = await driver.get_node_pool(account, cluster_id, "spot")
    assert state is not None and state.spot and state.autoscaling == Autoscaling(0, 3)


async def test_a_node_group_never_changes_shape_and_a_wrong_accelerator_is_refused(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock, cluster_id: str
) -> None:
    await driver.ensure_node_pool(account, cluster_id, NodePoolSpec("np", "m7i.large", 1))
    for changed in (
        NodePoolSpec("np", "m7i.xlarge", 1),
        NodePoolSpec("np", "m7i.large", 1, spot=True),
        NodePoolSpec("np", "m7i.large", 1, zones=("us-east-1a",)),
    ):
        with pytest.raises(ComputeError) as caught:
            await driver.ensure_node_pool(account, cluster_id, changed)
        assert caught.value.code is ErrorCode.INVALID_STATE
        assert "never changes shape" in caught.value.message
    assert eks.cluster("pools").nodegroups["np"].instance_type == "m7i.large"  # type: ignore[union-attr]
    with pytest.raises(ComputeError) as wrong:
        await driver.ensure_node_pool(
            account, cluster_id, NodePoolSpec("gpu", "p5.48xlarge", 1, accelerators=Accelerators("nvidia-a100", 8))
        )
    assert wrong.value.code is ErrorCode.INVALID_INPUT
    assert "8 x nvidia-h100" in wrong.value.message
    assert "gpu" not in eks.cluster("pools").nodegroups  # type: ignore[union-attr]


async def test_zero_nodes_is_a_node_group_of_none(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock, cluster_id: str
) -> None:
    await driver.ensure_node_pool(account, cluster_id, NodePoolSpec("empty", "m7i.large", 0))
    group = eks.cluster("pools").nodegroups["empty"]  # type: ignore[union-attr]
    assert (group.min_size, group.desired_size, group.max_size) == (0, 0, 1)
    await _provision(eks, clock, Timings().nodegroup_create)
    state = await driver.get_node_pool(account, cluster_id, "empty")
    assert state is not None and (state.status, state.node_count, state.autoscaling) == (NodePoolStatus.READY, 0, None)
    with pytest.raises(ComputeError) as caught:
        await driver.ensure_node_pool(account, cluster_id, NodePoolSpec("neg", "m7i.large", -1))
    assert caught.value.code is ErrorCode.INVALID_INPUT


async def test_a_retried_create_finds_the_first_node_group_and_cluster(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock, cluster_id: str
) -> None:
    first = await driver.ensure_node_pool(account, cluster_id, NodePoolSpec("np", "m7i.large", 1))
    second = await driver.ensure_node_pool(account, cluster_id, NodePoolSpec("np", "m7i.large", 1))
    assert first.name == second.name
    assert list(eks.cluster("pools").nodegroups) == ["np"]  # type: ignore[union-attr]
    again = await driver.ensure_cluster(account, ClusterSpec("pools", "us-east-1"))
    assert again.cluster_id == cluster_id
    assert again.outputs is not None
    assert again.outputs.global_id == "arn:aws:eks:us-east-1:111111111111:cluster/pools"
    assert again.outputs.location == "us-east-1"
    assert again.node_pools == ("np",)


async def test_nodes_count_per_zone_not_per_subnet(
    eks: EksEmulator, driver: EksKubernetes, clock: SimClock, eks_config: dict[str, object]
) -> None:
    eks.add_subnet("subnet-0000000000000000d", "us-east-1a")
    config = {**eks_config, "eksSubnetIds": [*eks_config["eksSubnetIds"], "subnet-0000000000000000d"]}  # type: ignore[misc]
    account = ProviderAccount(name="three-subnets", provider="aws", tenant_id="t", config=config)
    assert await driver.validate_substrate(account, {"flavors": []}, path="/p") == []
    state = await driver.ensure_cluster(account, ClusterSpec("subnets", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    await driver.ensure_node_pool(account, state.cluster_id, NodePoolSpec("np", "m7i.large", 3))
    assert driver.zone_count(account, ()) == 2
    group = eks.cluster("subnets").nodegroups["np"]  # type: ignore[union-attr]
    assert group.desired_size == 6, "three subnets in two zones: nodes x 2"
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    kube = eks.cluster("subnets").kube  # type: ignore[union-attr]
    assert kube is not None
    zones = sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in kube.objects("Node"))
    assert zones == ["us-east-1a"] * 3 + ["us-east-1b"] * 3
    assert all(n["spec"]["providerID"].startswith("aws:///us-east-1") for n in kube.objects("Node"))
    pool = await driver.get_node_pool(account, state.cluster_id, "np")
    assert pool is not None and pool.node_count == 3
