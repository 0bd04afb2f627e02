"""Teardown never gives up: a failed bcd removal on an adopted cluster is retried every 2 minutes,
and a created cluster the provider refuses to delete on the delete backoff (5, 10, 20, 40 minutes
... at most every 6 hours), each with the next attempt's time in the state read, until it works."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from adopt_world import PER_ZONE, adopting, only_kube, ready_and_joined, seed, state_is, view
from e2e_world import World
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.engine import DELETE_BACKOFF
from better_compute.kubernetes.calls import Call, watch_calls
from better_compute.kubernetes.cluster_access import kube_api
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing import KubeCluster

STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): provisioning, and a teardown, whose checks are the end state; a wait whose check is read
before the next retry (the first comes 2 or 5 minutes on) steps less than that."""


async def archived(world: World) -> bool:
    return await world.compute.pools.list(world.tenant_id) == []


async def bind_substrate_to(kube: KubeCluster, world: World, role: str) -> None:
    """The cluster's owner rebinds bc-substrate (to `view`: a refused credential for the teardown).

    roleRef cannot change, so the binding is made again; the owner keeps its labels, so it stays ours."""
    token = kube.issue_token("the-owner", ttl_seconds=600)
    client = kube_client(ClusterCredentials(kube.endpoint, kube.ca_data, token, world.cloud.clock.now()))
    try:
        labels = (await client.get(ClusterRoleBinding, SUBSTRATE_SUBJECT)).metadata.labels  # type: ignore[union-attr]
        await client.delete(ClusterRoleBinding, SUBSTRATE_SUBJECT)
        await client.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name=SUBSTRATE_SUBJECT, labels=labels),
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
                subjects=[Subject(kind="ServiceAccount", name=SUBSTRATE_SUBJECT, namespace=ACCESS_NAMESPACE)],
            )
        )
    finally:
        await client.close()


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_failed_bcd_removal_is_retried_every_2_minutes_until_it_works(world: World, provider: str) -> None:
    adopt_id = await seed(world, provider)
    await world.compute.fleet.apply(adopting(world, provider, adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, PER_ZONE[provider]), what="adopted and joined", every=STEP)
    kube = only_kube(world)
    await bind_substrate_to(kube, world, "view")
    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)

    async def retrying() -> bool:
        current = await view(world)
        return current.state == "deleting" and current.next_attempt_at is not None

    await world.until(retrying, minutes=10, what="the teardown retries")
    attempts = []
    for _ in range(3):
        current = await view(world)
        assert current.next_attempt_at is not None and current.updated_at is not None
        assert current.next_attempt_at - current.updated_at == timedelta(minutes=2)
        assert "could not remove bcd" in (current.message or "") and "403" in (current.message or "")
        assert current.to_dict()["nextAttemptAt"] == current.next_attempt_at.isoformat()
        attempts.append(current.next_attempt_at)
        await world.compute.run_until_idle(until=current.next_attempt_at)
        await world.cloud.settle()
    assert [b - a for a, b in itertools.pairwise(attempts)] == [timedelta(minutes=2)] * 2
    findings = {f.code: f for f in await world.compute.doctor()}
    assert "kubernetes.substrate-teardown-retrying" in findings
    assert kube.get_object("DaemonSet", "bcd", "bc-system") is not None, "still there, and said so"

    await bind_substrate_to(kube, world, "cluster-admin")  # the owner puts it back: the next retry works
    await world.until(lambda: archived(world), minutes=30, what="the teardown finishes", every=STEP)
    assert kube.get_object("DaemonSet", "bcd", "bc-system") is None
    assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is None
    assert kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT) is None
    assert "kubernetes.substrate-teardown-retrying" not in {f.code for f in await world.compute.doctor()}


def refuse_delete(world: World, provider: str, cluster_id: str, refuse: bool) -> str:
    """Make the provider refuse (or allow again) the cluster's delete; returns what its refusal says."""
    if provider == "gke":
        world.cloud.gke.faults.refuse_delete = refuse
        return "cannot be deleted"
    faults = world.cloud.eks.faults if provider == "eks" else world.cloud.doks.faults
    key = cluster_id.split("/")[-1]  # EKS keys its fault by the cluster's name, DOKS by its UUID
    if refuse:
        faults.refuse_delete(key, message="cluster is in use by a load balancer")
    else:
        faults.allow_delete(key)
    return "in use by a load balancer"


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_refused_cluster_delete_backs_off_5_10_20_40_minutes_up_to_6_hours(world: World, provider: str) -> None:
    world.cloud.kube.pod_runtime = None  # no bcd: the rule is the provider's delete, not the Nodes
    await world.compute.fleet.apply(world.document(provider), tenant_id=world.tenant_id)
    await world.until(lambda: state_is(world, "ready"), what="the created cluster is ready", every=STEP)
    current = await view(world)
    assert current.cluster is not None and current.cluster.provider_cluster_id is not None
    cluster_id = current.cluster.provider_cluster_id
    said = refuse_delete(world, provider, cluster_id, True)
    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.until(lambda: state_is(world, "error"), minutes=60, what="the delete is refused", every=STEP)

    (record,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    assert record.status == "error" and said in (record.message or "")
    attempts = [record.updated_at]
    for _ in range(9):
        current = await view(world)
        assert current.state == "error" and said in (current.message or "")
        assert current.next_attempt_at is not None and current.next_attempt_at > attempts[-1]
        attempts.append(current.next_attempt_at)
        await world.compute.run_until_idle(until=current.next_attempt_at)
        await world.cloud.settle()
    waits = [int((b - a).total_seconds()) for a, b in itertools.pairwise(attempts)]
    assert waits == [300, 600, 1200, 2400, 4800, 9600, 19200, 21600, 21600]
    assert waits == [DELETE_BACKOFF.delay(n) for n in range(1, 10)]

    refuse_delete(world, provider, cluster_id, False)  # the cause is fixed: the next retry finishes
    next_attempt = (await view(world)).next_attempt_at
    assert next_attempt is not None and next_attempt - attempts[-1] == timedelta(hours=6)
    await world.compute.run_until_idle(until=next_attempt)
    await world.until(lambda: archived(world), minutes=30, what="the teardown finishes", every=STEP)
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await k.account(world.tenant_id, "managed-k8s")
    assert await driver.get_cluster(account, cluster_id) is None, "the cluster is gone at the provider"
    assert await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) == []


async def test_a_created_cluster_whose_control_plane_is_dead_is_deleted_with_no_retry_of_bcd(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a created cluster removes bcd with it: a control plane that stopped answering
    costs the teardown one try, not a retry every 2 minutes for ever (that is for adopted clusters).
    The try ends at the client's timeout, in real time: 2 s here rather than the 30 s default."""
    monkeypatch.setattr(kube_api, "DEFAULT_TIMEOUT_SECONDS", 2.0)
    world.cloud.kube.pod_runtime = None  # no bcd processes: no bookings, so the cluster may go at once
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: state_is(world, "ready"), what="the created cluster is ready", every=STEP)
    current = await view(world)
    assert current.cluster is not None and current.cluster.provider_cluster_id is not None
    cluster_id = current.cluster.provider_cluster_id
    asked: list[float] = []
    archived_at = world.cloud.clock.now()

    async def observe(call: Call) -> None:
        if call.method == "delete_cluster":
            asked.append((world.cloud.clock.now() - archived_at).total_seconds())

    kube = only_kube(world)
    kube.unresponsive = True
    try:
        with watch_calls(observe):
            await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
            await world.until(lambda: archived(world), minutes=10, what="the teardown finishes", every=15)
    finally:
        kube.unresponsive = False
    assert cluster_id not in world.cloud.doks.clusters, "the provider's cluster is deleted"
    assert await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) == []
    # the node pool's delete is asked at once (the one try at bcd fails in no simulated time) and the
    # cluster's the moment the node pool is gone: DOKS takes 90 s, looked at every 15 s; no 2-minute wait
    assert asked == [world.cloud.doks.timings.pool_deletion] == [90.0], asked
