"""Named instances leave an EKS node group through its Auto Scaling group (boto3 `autoscaling`, query/XML).

TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity false: the group launches a
replacement (a new instance, a new Node name) and the count stays; true: the desired capacity,
and so the node group's desiredSize, is lower by one.
"""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import Autoscaling, ClusterSpec, NodePoolSpec
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.vps.provider import ProviderAccount

T = Timings()


async def advance(clock: SimClock, eks: EksEmulator, seconds: float) -> None:
    clock.advance(seconds)
    await eks.settle()


async def two_nodes(
    eks: EksEmulator,
    driver: EksKubernetes,
    account: ProviderAccount,
    clock: SimClock,
    autoscaling: Autoscaling | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """A ready node group of one node per zone over the account's two zones."""
    state = await driver.ensure_cluster(account, ClusterSpec("machines", "us-east-1"))
    await advance(clock, eks, T.cluster_create)
    await driver.ensure_node_pool(
        account, state.cluster_id, NodePoolSpec("gpu", "g6.xlarge", 1, autoscaling=autoscaling)
    )
    await advance(clock, eks, T.nodegroup_create)
    return state.cluster_id, nodes(eks)


def nodes(eks: EksEmulator) -> list[dict[str, Any]]:
    cluster = eks.cluster("machines")
    assert cluster is not None and cluster.kube is not None
    found = cluster.kube.objects("Node", labels={"eks.amazonaws.com/nodegroup": "gpu"})
    return sorted(found, key=lambda n: n["metadata"]["name"])


def group(eks: EksEmulator) -> Any:
    cluster = eks.cluster("machines")
    assert cluster is not None
    return cluster.nodegroups["gpu"]


async def test_replacing_an_instance_terminates_it_and_the_group_launches_another(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id, (first, second) = await two_nodes(eks, driver, account, clock)

    await driver.remove_machines(account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=True)

    assert group(eks).desired_size == 2 and len(group(eks).terminating) == 1
    # asked again (a retry after a crash): the instance is Terminating, no member any more: skipped
    await driver.remove_machines(account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=True)
    await advance(clock, eks, T.instance_termination)
    assert [n["metadata"]["name"] for n in nodes(eks)] == [second["metadata"]["name"]]
    await advance(clock, eks, T.instance_launch)
    after = nodes(eks)
    assert len(after) == 2 and first["metadata"]["name"] not in {n["metadata"]["name"] for n in after}
    state = await driver.get_node_pool(account, cluster_id, "gpu")
    assert state is not None and state.node_count == 1 and state.autoscaling is None


async def test_removing_an_instance_of_a_fixed_group_lowers_its_minimum_then_its_desired_size(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id, (first, second) = await two_nodes(eks, driver, account, clock)
    assert group(eks).min_size == group(eks).desired_size == 2

    await driver.remove_machines(account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=False)

    assert (group(eks).min_size, group(eks).desired_size) == (1, 1)
    await advance(clock, eks, T.instance_termination + T.instance_launch + T.nodegroup_update)
    assert [n["metadata"]["name"] for n in nodes(eks)] == [second["metadata"]["name"]]


async def test_an_autoscaled_group_keeps_its_bounds_and_auto_scaling_refuses_to_go_below_its_minimum(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id, (first, _) = await two_nodes(eks, driver, account, clock, Autoscaling(1, 3))
    assert (group(eks).min_size, group(eks).desired_size, group(eks).max_size) == (2, 2, 6)

    with pytest.raises(ComputeError) as caught:
        await driver.remove_machines(account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=False)

    assert caught.value.code is ErrorCode.INVALID_STATE
    assert "ValidationError" in str(caught.value) and "min size constraint" in str(caught.value)
    assert (group(eks).min_size, group(eks).desired_size, group(eks).max_size) == (2, 2, 6)
    assert len(nodes(eks)) == 2


async def test_a_providerid_that_is_not_an_eks_instance_is_refused_before_any_call(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id, _ = await two_nodes(eks, driver, account, clock)
    with pytest.raises(ComputeError) as caught:
        await driver.remove_machines(account, cluster_id, "gpu", ("gce://p/us-central1-a/vm",), replace=True)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert len(nodes(eks)) == 2


async def test_a_missing_node_group_is_not_found(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id, (first, _) = await two_nodes(eks, driver, account, clock)
    with pytest.raises(ComputeError) as caught:
        await driver.remove_machines(account, cluster_id, "nope", (first["spec"]["providerID"],), replace=True)
    assert caught.value.code is ErrorCode.NOT_FOUND
