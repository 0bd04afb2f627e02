"""Named machines leave a GKE node pool through its managed instance groups (Compute Engine, REST transport).

recreateInstances recreates a VM under its name from the group's template (a new Node object of
the same name, the count stays); deleteInstances removes it and lowers the group's targetSize.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from gke_world import PROJECT, Gke
from test_gke_rules import ready_cluster, ready_pool

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.calls import CALLS, Call, CountedDriver
from better_compute.kubernetes.provider import NodePoolSpec, ProviderKubernetes
from better_compute.testing.gke.machines import INSTANCE_BOOT_SECONDS, INSTANCE_DELETE_SECONDS

ZONE = "us-central1-b"


async def two_nodes(gke: Gke) -> tuple[str, list[dict[str, Any]]]:
    cluster_id = await ready_cluster(gke, ZONE, name="machines")
    await ready_pool(gke, cluster_id, NodePoolSpec(name="gpu", machine_type="e2-standard-4", node_count=2))
    return cluster_id, nodes(gke)


def nodes(gke: Gke) -> list[dict[str, Any]]:
    kube = gke.emulator.kube_cluster(ZONE, "machines")
    return sorted(
        kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "gpu"}), key=lambda n: n["metadata"]["name"]
    )


def group(gke: Gke) -> dict[str, Any]:
    (record,) = gke.emulator.clusters.values()
    pool = record.node_pools["gpu"]
    return gke.emulator.instance_group_manager(PROJECT, ZONE, pool.group_name(ZONE))


async def test_removing_a_machine_deletes_that_vm_and_lowers_the_target_size(gke: Gke) -> None:
    cluster_id, (first, second) = await two_nodes(gke)

    await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=False)

    assert (
        "POST",
        f"compute/v1/projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{group(gke)['name']}/deleteInstances",
    ) in gke.emulator.requests
    assert group(gke)["targetSize"] == 1
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "gpu")
    assert state is not None and state.node_count == 1
    await gke.advance(INSTANCE_DELETE_SECONDS - 1)
    assert len(nodes(gke)) == 2  # the operation is DONE once flagged; the VM goes a little later
    await gke.advance(1)
    assert [n["metadata"]["name"] for n in nodes(gke)] == [second["metadata"]["name"]]

    # again, after a crash: the VM is no member any more, and is skipped
    await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=False)
    assert group(gke)["targetSize"] == 1


async def test_replacing_a_machine_recreates_that_vm_under_its_name_and_keeps_the_count(gke: Gke) -> None:
    cluster_id, (first, second) = await two_nodes(gke)
    name, uid = first["metadata"]["name"], first["metadata"]["uid"]

    await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=True)

    assert group(gke)["targetSize"] == 2
    assert group(gke)["currentActions"]["recreating"] == 1 and not group(gke)["status"]["isStable"]
    # asked again while it is under way: it is flagged already, nothing more happens
    await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=True)
    await gke.advance(INSTANCE_DELETE_SECONDS)
    assert [n["metadata"]["name"] for n in nodes(gke)] == [second["metadata"]["name"]]
    await gke.advance(INSTANCE_BOOT_SECONDS)
    after = {n["metadata"]["name"]: n for n in nodes(gke)}
    assert sorted(after) == sorted([name, second["metadata"]["name"]])
    assert after[name]["metadata"]["uid"] != uid
    assert group(gke)["currentActions"]["recreating"] == 0 and group(gke)["status"]["isStable"]
    state = await gke.driver.get_node_pool(gke.account, cluster_id, "gpu")
    assert state is not None and state.node_count == 2


@pytest.mark.parametrize(
    ("provider_id", "code"),
    [
        ("aws:///us-east-1a/i-0123", ErrorCode.INVALID_INPUT),
        (f"gce://{PROJECT}/us-central1-f/gke-machines-gpu-1234abcd-zzzz", ErrorCode.INVALID_INPUT),
    ],
)
async def test_a_machine_that_is_not_the_pools_is_refused_and_nothing_changes(
    gke: Gke, provider_id: str, code: ErrorCode
) -> None:
    cluster_id, before = await two_nodes(gke)
    with pytest.raises(ComputeError) as caught:
        await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (provider_id,), replace=True)
    assert caught.value.code is code
    await gke.advance(INSTANCE_DELETE_SECONDS + INSTANCE_BOOT_SECONDS)
    assert [n["metadata"]["uid"] for n in nodes(gke)] == [n["metadata"]["uid"] for n in before]


async def test_recreating_a_vm_that_is_no_member_is_refused_in_compute_engines_words(gke: Gke) -> None:
    cluster_id, _ = await two_nodes(gke)
    stray = f"gce://{PROJECT}/{ZONE}/gke-machines-gpu-00000000-gone"
    with pytest.raises(ComputeError) as caught:
        await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (stray,), replace=True)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert "is not a member of managed instance group" in str(caught.value)


async def test_compute_engine_refusing_the_update_is_permission_denied(gke: Gke) -> None:
    cluster_id, (first, _) = await two_nodes(gke)
    gke.emulator.faults.compute_denied = True
    with pytest.raises(ComputeError) as caught:
        await gke.driver.remove_machines(gke.account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=False)
    assert caught.value.code is ErrorCode.PERMISSION_DENIED
    assert "compute.instanceGroupManagers.update" in str(caught.value)


async def test_a_missing_node_pool_is_not_found(gke: Gke) -> None:
    cluster_id, (first, _) = await two_nodes(gke)
    with pytest.raises(ComputeError) as caught:
        await gke.driver.remove_machines(gke.account, cluster_id, "nope", (first["spec"]["providerID"],), replace=True)
    assert caught.value.code is ErrorCode.NOT_FOUND


async def test_the_seam_counts_a_removal_as_a_write(gke: Gke) -> None:
    cluster_id, (first, _) = await two_nodes(gke)
    counted = CountedDriver(gke.driver, "gcp")
    assert isinstance(counted, ProviderKubernetes) and isinstance(gke.driver, ProviderKubernetes)
    before = CALLS.snapshot()
    await counted.remove_machines(gke.account, cluster_id, "gpu", (first["spec"]["providerID"],), replace=True)
    assert CALLS.since(before) == Counter({Call("gcp", "remove_machines", "write"): 1})
