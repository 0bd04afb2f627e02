"""The demo's adopt chapter: a cluster someone else runs at GKE, adopted as one more pool.

The owner's cluster is seeded at the GKE emulator with a node pool of their own; the fleet
document gains a pool whose cluster is `{"adopt": <its id>}`. better-compute adds its own
node pool (`bc-<6>-<flavor>`) and bcd, and leaves the owner's pool alone. After the prune,
`left_in_adopted` says what of ours is still in the cluster: nothing, while the cluster and
the owner's node pool stay.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import NodePoolState, ProviderKubernetes
from better_compute.testing.gke import SeedPool
from better_compute.vps.provider import ProviderAccount

if TYPE_CHECKING:
    from better_compute.demo.story import Story

__all__ = ["ADOPTED_POOL", "Adopted", "adopt", "left_in_adopted"]

ADOPTED_POOL = "gke-adopted"
FROM_POOL = "gke-h100"
"""The example's GKE pool: the adopting pool takes its site, account and first flavor."""
OWNER_CLUSTER = "their-cluster"
OWNER_POOL = "their-pool"
LABELLED_KINDS = ("Namespace", "ConfigMap", "Secret", "DaemonSet")
"""The kinds better-compute labels with the pool's id in a cluster it works in."""


@dataclass(frozen=True)
class Adopted:
    """What the prune checks the adopted cluster against."""

    cluster_id: str
    kube_id: str
    pool_id: str
    owner_pool: NodePoolState


def adopting_document(document: dict[str, Any], adopt_id: str) -> dict[str, Any]:
    """`document` with one more pool, adopting `adopt_id` with one node of the GKE pool's first flavor."""
    adopting = copy.deepcopy(document)
    pool = copy.deepcopy(next(p for p in document["pools"] if p["name"] == FROM_POOL))
    pool["name"] = ADOPTED_POOL
    substrate = pool["policy"]["substrate"]
    substrate["cluster"] = {"adopt": adopt_id}
    substrate["flavors"] = [{**substrate["flavors"][0], "nodes": 1}]
    adopting["pools"].append(pool)
    return adopting


async def seed_owner_cluster(story: Story) -> tuple[str, str]:
    """The owner's running GKE cluster in the example's project; (its adopt id, its Kubernetes API id)."""
    cloud = story.world.cloud
    before = set(cloud.kube.clusters)
    config = next(a for a in story.world.document["providerAccounts"] if a["provider"] == "gcp")["config"]
    adopt_id = await cloud.gke.seed_cluster(
        OWNER_CLUSTER,
        project=config["projectId"],
        location="us-central1",
        locations=tuple(config["zones"]),
        pools=(SeedPool(OWNER_POOL),),
    )
    (kube_id,) = set(cloud.kube.clusters) - before
    return adopt_id, kube_id


async def adopt(story: Story) -> None:
    compute, tenant = story.world.compute, story.tenant
    adopt_id, kube_id = await seed_owner_cluster(story)
    kube = compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await kube.account(tenant, "google")
    owner_pool = await driver.get_node_pool(account, adopt_id, OWNER_POOL)
    story.display.note(f"The owner runs {adopt_id} at GKE, with their node pool {OWNER_POOL}.")
    story.document = adopting_document(story.world.document, adopt_id)
    await story.apply(story.document, "fleet-adopt.json")

    async def joined() -> bool:
        return await story.joined_count(ADOPTED_POOL, 1)

    await story.follow(f"{ADOPTED_POOL} ready, its Node joined", joined)
    pool = await compute.pools.get_by_name(tenant, ADOPTED_POOL)
    state = await driver.get_cluster(account, adopt_id)
    pools_now = tuple(state.node_pools) if state else ()
    ours = [name for name in pools_now if name.startswith("bc-")]
    owner_now = await driver.get_node_pool(account, adopt_id, OWNER_POOL)
    story.adopted = Adopted(adopt_id, kube_id, pool.id, owner_pool)
    story.summary.adopted = {
        "pool": ADOPTED_POOL,
        "cluster": adopt_id,
        "ownerPools": [name for name in pools_now if name not in ours],
        "ownerPoolsUntouched": owner_now == owner_pool,
        "ourPools": ours,
        "nodesJoined": len(
            (await compute.kubernetes_substrates.get(tenant_id=tenant, pool_id=ADOPTED_POOL)).nodes_joined
        ),
    }
    story.display.table(
        f"Node pools of {adopt_id} at GKE",
        ["node pool", "whose", "what happened"],
        [
            (name, "ours" if name in ours else "the owner's", "added, its Node joined" if name in ours else "untouched")
            for name in pools_now
        ],
    )


async def left_in_adopted(
    story: Story, adopted: Adopted, account: ProviderAccount, driver: ProviderKubernetes
) -> dict[str, Any]:
    """After the prune: is the cluster and the owner's pool still there, and what of ours is left in it."""
    state = await driver.get_cluster(account, adopted.cluster_id)
    owner_pool = await driver.get_node_pool(account, adopted.cluster_id, OWNER_POOL) if state else None
    kube = story.world.cloud.kube.clusters.get(adopted.kube_id)
    ours = [f"node pool {name}" for name in (state.node_pools if state else ()) if name.startswith("bc-")]
    if kube is not None:
        ours += [
            f"{kind} {o['metadata']['name']}"
            for kind in LABELLED_KINDS
            for o in kube.objects(kind, labels={SUBSTRATE_POOL_LABEL: adopted.pool_id})
        ]
        if kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None:
            ours.append(f"ServiceAccount {SUBSTRATE_SUBJECT}")
        if kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is not None:
            ours.append(f"ConfigMap {CLAIM_NAME}")
    return {
        "clusterKept": state is not None and kube is not None,
        "ownerPoolsKept": owner_pool is not None and owner_pool == adopted.owner_pool,
        "oursLeft": ours,
    }
