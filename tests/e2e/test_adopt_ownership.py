"""Whose objects are whose on an adopted cluster: teardown takes back what the in-cluster claim and
our labels say is ours, whatever the database recorded, and nothing of the owner's.

- a claim taken before a TokenRequest that keeps failing (`claimed_at` never recorded) is given
  back with the identity made after it, and the cluster can be adopted again;
- an owner's own `bc-substrate` ServiceAccount (no label of ours) survives the teardown;
- an owner's own `bc-system` namespace, and their ConfigMap in it, survive the teardown, and only
  bcd's objects go from it.
"""

from __future__ import annotations

from adopt_world import adopting, only_kube, ready_and_joined, seed, view
from e2e_world import World
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, ServiceAccount

from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.kubernetes.names import MANAGED_BY_KEY, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.kubernetes.substrates.manifests import NAMESPACE
from better_compute.testing import KubeCluster


async def archived(world: World, pool: str = "gpu-fleet") -> bool:
    return [p for p in await world.compute.pools.list(world.tenant_id) if p.name == pool] == []


async def as_owner(kube: KubeCluster, world: World, *objects: object) -> None:
    """The cluster's owner makes these objects, with their own admin credential."""
    token = kube.issue_token("the-owner", ttl_seconds=600)
    client = kube_client(ClusterCredentials(kube.endpoint, kube.ca_data, token, world.cloud.clock.now()))
    try:
        for obj in objects:
            await client.create(obj)  # type: ignore[call-overload]
    finally:
        await client.close()


def identity(kube: KubeCluster) -> dict[str, bool]:
    """Which of the claim, bc-substrate and its binding are on the cluster."""
    return {
        "claim": kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is not None,
        "service account": kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None,
        "binding": kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT) is not None,
    }


async def test_a_claim_taken_before_a_failing_token_request_is_given_back_and_the_cluster_adoptable_again(
    world: World,
) -> None:
    adopt_id = await seed(world, "doks")
    kube = only_kube(world)
    kube.fail_until_cleared("create", "serviceaccounts", "token")  # bc-substrate's TokenRequest keeps failing
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)

    async def stuck() -> bool:
        current = await view(world)
        return current.state == "error" and "requesting a token" in (current.message or "")

    await world.until(stuck, minutes=30, what="the TokenRequest fails")
    assert identity(kube) == {"claim": True, "service account": True, "binding": True}, "made before the token"
    (record,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    assert record.status == "ready"

    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.until(lambda: archived(world), minutes=30, what="the teardown finishes")
    assert identity(kube) == {"claim": False, "service account": False, "binding": False}, "all three given back"

    kube.clear_failures()  # another pool adopts the cluster: it is no longer claimed by the archived one
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id, pool="again"), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1, "again"), minutes=60, what="adopted again")


async def test_an_owners_own_bc_substrate_service_account_survives_the_teardown(world: World) -> None:
    adopt_id = await seed(world, "doks")
    kube = only_kube(world)
    await as_owner(
        kube,
        world,
        Namespace(metadata=ObjectMeta(name=ACCESS_NAMESPACE)),
        ServiceAccount(metadata=ObjectMeta(name=SUBSTRATE_SUBJECT, namespace=ACCESS_NAMESPACE)),
    )
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), minutes=60, what="adopted and joined")
    binding = kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT)
    assert binding is not None and binding["metadata"]["labels"][MANAGED_BY_KEY] == "better-compute"

    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.until(lambda: archived(world), minutes=60, what="the teardown finishes")
    assert identity(kube) == {"claim": False, "service account": True, "binding": False}
    assert kube.get_object("Namespace", ACCESS_NAMESPACE) is not None, "the owner's namespace stays"


async def test_an_owners_own_bc_system_namespace_and_configmap_survive_and_only_bcd_goes(world: World) -> None:
    adopt_id = await seed(world, "doks")
    kube = only_kube(world)
    await as_owner(
        kube,
        world,
        Namespace(metadata=ObjectMeta(name=NAMESPACE, labels={"team": "owner"})),
        ConfigMap(metadata=ObjectMeta(name="owners-settings", namespace=NAMESPACE), data={"keep": "me"}),
    )
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), minutes=60, what="adopted and joined")
    pool_id = (await view(world)).pool_id
    namespace = kube.get_object("Namespace", NAMESPACE)
    assert namespace is not None and SUBSTRATE_POOL_LABEL not in namespace["metadata"].get("labels", {}), (
        "a namespace we did not make is not labelled as ours"
    )
    assert kube.get_object("DaemonSet", "bcd", NAMESPACE) is not None

    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.until(lambda: archived(world), minutes=60, what="the teardown finishes")
    assert kube.get_object("Namespace", NAMESPACE) is not None, "the owner's namespace stays"
    kept = kube.get_object("ConfigMap", "owners-settings", NAMESPACE)
    assert kept is not None and kept["data"] == {"keep": "me"}, "the owner's ConfigMap stays"
    ours = [
        f"{kind} {o['metadata']['name']}"
        for kind in ("ConfigMap", "Secret", "DaemonSet")
        for o in kube.objects(kind, NAMESPACE, labels={SUBSTRATE_POOL_LABEL: pool_id})
    ]
    assert ours == [], "bcd's objects are gone"
