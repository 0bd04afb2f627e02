"""Adopting a Kubernetes 1.29 cluster, where ValidatingAdmissionPolicy is not admissionregistration.k8s.io/v1.

1.29 serves the access guard's kinds only as v1beta1, and only where the cluster turned that beta API
on (GKE's `enableK8sBetaApis`); 1.30 made them v1 (docs/adopt.md). The substrate writes the guard at
the version the cluster serves, and refuses, before it makes anything, a cluster that serves neither.
"""

from __future__ import annotations

from adopt_world import OWN_POOL, PER_ZONE, adopting, only_kube, ready_and_joined, state_is, view
from e2e_world import World

from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE
from better_compute.kubernetes.cluster_access.substrate_identity import (
    ACCESS_GUARD,
    ACCESS_NAMESPACE,
    SUBSTRATE_SUBJECT,
)
from better_compute.testing.gke import SeedPool

BETA = (
    "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicies",
    "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicybindings",
)


async def test_a_1_29_cluster_with_the_beta_api_on_is_adopted_with_a_v1beta1_guard_and_booked(world: World) -> None:
    adopt_id = await world.cloud.gke.seed_cluster(
        "theirs",
        project="my-project",
        location="us-central1",
        locations=("us-central1-a",),
        pools=(SeedPool(OWN_POOL),),
        version="1.29",
        beta_apis=BETA,
    )
    kube = only_kube(world)
    assert kube.version.startswith("1.29.")
    await world.compute.fleet.apply(adopting(world, "gke", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, PER_ZONE["gke"]), minutes=60, what="adopted and joined")

    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        guard = kube.get_object(kind, ACCESS_GUARD)
        assert guard is not None and guard["apiVersion"] == "admissionregistration.k8s.io/v1beta1", kind
    assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert reservation.node_id
    await world.compute.reservations.release(world.tenant_id, reservation.id)


async def test_a_1_29_cluster_serving_no_admission_policy_is_refused_and_left_as_it_was(world: World) -> None:
    adopt_id = await world.cloud.eks.seed_cluster("theirs", version="1.29", nodegroups={OWN_POOL: ("m7i.large", 1)})
    kube = only_kube(world)
    before = {kind: len(kube.objects(kind)) for kind in ("Namespace", "ConfigMap", "ServiceAccount")}
    await world.compute.fleet.apply(adopting(world, "eks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: state_is(world, "error"), what="the adopt refused")

    current = await view(world)
    assert "serves no ValidatingAdmissionPolicy" in (current.message or "")
    assert "upgrade the cluster to 1.30" in (current.message or "")
    assert kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is None, "not even claimed"
    assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is None
    assert {kind: len(kube.objects(kind)) for kind in before} == before
