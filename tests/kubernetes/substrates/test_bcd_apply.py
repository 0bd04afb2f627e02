"""bcd's objects are applied only where the cluster's differ (substrates/applied.py): a second apply of the same
objects writes nothing; a field someone changed, an object someone deleted, a field the agent now sets and one
it no longer sets are each applied again, and only that object. Against the Kubernetes API emulator."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from better_compute.core.clock import SimClock
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.calls import CALLS
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials, GpuNode
from better_compute.kubernetes.substrates.agent_step import apply_bcd
from better_compute.kubernetes.substrates.applied import APPLIED_ANNOTATION, holds, stamped
from better_compute.kubernetes.substrates.manifests import CONFIG_MAP, DAEMON_SET, NAMESPACE
from better_compute.testing.kube import KubeApiServer, KubeCluster
from better_compute.testing.kube.operations import MERGE

AGENT = SubstrateAgent("ghcr.io/better-compute/bcd:dev", "wss://gw.example/", (), "https://cp.example")
GKE_NODE = GpuNode("/home/kubernetes/bin/nvidia", critical_pods_quota=True)
POOL = "pool_applied0000001"


@pytest.fixture
async def cluster(clock: SimClock) -> AsyncIterator[KubeCluster]:
    async with KubeApiServer(clock) as server:
        yield server.add_cluster("gke")


async def apply(cluster: KubeCluster, clock: SimClock, agent: SubstrateAgent = AGENT) -> tuple[int, Counter[str]]:
    """apply_bcd once: how many objects it applied, and the Kubernetes writes it made."""
    token = cluster.issue_token("provider-admin", ttl_seconds=600)
    credentials = ClusterCredentials(cluster.endpoint, cluster.ca_data, token, clock.now() + timedelta(seconds=600))
    client = kube_client(credentials)
    before = CALLS.snapshot()
    try:
        applied = await apply_bcd(client, POOL, agent, GKE_NODE)
    finally:
        await client.close()
    return applied, Counter({c.method: n for c, n in CALLS.since(before).items() if c.access == "write"})


def edit(cluster: KubeCluster, kind: str, name: str, body: dict[str, object]) -> None:
    """What `kubectl edit` by someone else does: a merge patch under another field manager."""
    version = "apps/v1" if kind == "DaemonSet" else "v1"
    cluster.ops.patch(cluster.resource(version, kind), NAMESPACE, name, body, MERGE, manager="kubectl-edit")


async def test_a_second_apply_of_the_same_objects_writes_nothing(cluster: KubeCluster, clock: SimClock) -> None:
    applied, writes = await apply(cluster, clock)
    assert applied == 4, "GKE: ResourceQuota, ConfigMap, bcd's DaemonSet, the driver installer"
    assert writes == Counter(
        {"POST namespaces": 1, "PATCH resourcequotas": 1, "PATCH configmaps": 1, "PATCH daemonsets": 2}
    )
    assert await apply(cluster, clock) == (0, Counter()), "nothing differs: nothing is written"


async def test_what_someone_changed_or_deleted_is_applied_again_and_only_that(
    cluster: KubeCluster, clock: SimClock
) -> None:
    await apply(cluster, clock)
    edit(cluster, "DaemonSet", DAEMON_SET, {"spec": {"updateStrategy": {"type": "OnDelete"}}})
    assert await apply(cluster, clock) == (1, Counter({"PATCH daemonsets": 1}))
    daemon_set = cluster.get_object("DaemonSet", DAEMON_SET, NAMESPACE)
    assert daemon_set is not None and daemon_set["spec"]["updateStrategy"]["type"] == "RollingUpdate"

    edit(cluster, "ConfigMap", CONFIG_MAP, {"data": {"BCD_GATEWAY_URL": "wss://elsewhere.example"}})
    assert await apply(cluster, clock) == (1, Counter({"PATCH configmaps": 1}))
    config = cluster.get_object("ConfigMap", CONFIG_MAP, NAMESPACE)
    assert config is not None and config["data"]["BCD_GATEWAY_URL"] == AGENT.gateway_url

    cluster.ops.delete(cluster.resource("v1", "ConfigMap"), NAMESPACE, CONFIG_MAP)
    assert await apply(cluster, clock) == (1, Counter({"PATCH configmaps": 1}))
    assert cluster.get_object("ConfigMap", CONFIG_MAP, NAMESPACE) is not None
    assert await apply(cluster, clock) == (0, Counter())


async def test_a_field_the_agent_sets_and_then_no_longer_sets_is_applied_each_time(
    cluster: KubeCluster, clock: SimClock
) -> None:
    await apply(cluster, clock)
    with_class = dataclasses.replace(AGENT, runtime_class_name="nvidia")
    assert await apply(cluster, clock, with_class) == (1, Counter({"PATCH daemonsets": 1}))
    daemon_set = cluster.get_object("DaemonSet", DAEMON_SET, NAMESPACE)
    assert daemon_set is not None and daemon_set["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    # the cluster's DaemonSet still holds every field of the manifest without the class: only the digest tells
    assert await apply(cluster, clock) == (1, Counter({"PATCH daemonsets": 1}))
    daemon_set = cluster.get_object("DaemonSet", DAEMON_SET, NAMESPACE)
    assert daemon_set is not None and "runtimeClassName" not in daemon_set["spec"]["template"]["spec"]


def test_holds_ignores_what_the_server_adds_and_sees_every_change() -> None:
    desired = stamped({"kind": "ConfigMap", "metadata": {"name": "bcd"}, "data": {"A": "1"}, "list": [{"x": 1}]})
    assert desired["metadata"]["annotations"][APPLIED_ANNOTATION], "the digest is stamped on"
    live = {
        "kind": "ConfigMap",
        "metadata": {**desired["metadata"], "uid": "u", "annotations": {**desired["metadata"]["annotations"], "b": ""}},
        "data": {"A": "1"},
        "list": [{"x": 1, "defaulted": True}],
        "status": {},
    }
    assert holds(live, desired)
    assert not holds({**live, "data": {"A": "2"}}, desired)
    assert not holds({**live, "data": {}}, desired)
    assert not holds({**live, "list": [{"x": 1}, {"x": 2}]}, desired), "an element someone added"
    assert not holds({**live, "list": [{"x": True}]}, desired), "True is not 1"
    assert not holds(None, desired)
    other = stamped({"kind": "ConfigMap", "metadata": {"name": "bcd"}, "data": {"A": "2"}, "list": [{"x": 1}]})
    assert other["metadata"]["annotations"] != desired["metadata"]["annotations"], "another manifest, another digest"
