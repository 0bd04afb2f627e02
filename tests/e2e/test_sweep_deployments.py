"""Two deployments of better-compute in one provider account: each one's sweep leaves the other's alone.

Deployment A (the world's Compute, on the test's database: SQLite and PostgreSQL) runs a pool whose
Nodes joined. Deployment B (another Compute, on a database of its own, over the same emulated GKE,
EKS or DOKS account) makes a cluster of its own and loses its record (its backup restored). B's sweep,
through the CLI, lists only its own cluster: none of A's cluster, node pools or in-cluster objects,
which it counts as another deployment's. `--delete` deletes B's cluster and nothing of A's, whose
pool stays ready. B's cluster, with its deployment mark taken off at the emulator (as an older
better-compute made it), is still listed, saying it carries no deployment mark. Each CLI call is a
Compute of its own on B's database (a restart): every one answers the same deployment id, and so
does B's database restored from its backup.

On a cluster A adopted (someone else's, so it carries no cluster mark), the claim A took carries A's
deployment mark: B's sweep lists none of A's claim, bcd objects, bc-substrate or node pool there.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from adopt_world import PER_ZONE, adopting, cli, ready_and_joined, seed
from e2e_world import SECRET, World
from test_orphan_sweep import ACCOUNT, backup, emulated, restore

from better_compute.kubernetes.provider import DEPLOYMENT_LABEL, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.sweep.orphans import UNMARKED
from better_compute.store import Database


async def sweep_b(world: World, *flags: str) -> dict[str, Any]:
    result = await cli(world, "sweep", "--account", ACCOUNT, "--json", *flags)
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def unmark(world: World, provider: str, name: str) -> None:
    """Take the deployment mark off cluster `name` at the emulator, as a better-compute before the mark made it."""
    cloud = world.cloud
    if provider == "gke":
        (cluster,) = [c for c in cloud.gke.clusters.values() if c.name == name]
        assert cluster.resource_labels.pop("better-compute-dev-deployment")
    elif provider == "eks":
        (found,) = [c for c in cloud.eks.world.clusters.values() if c.name == name]
        assert found.tags.pop(DEPLOYMENT_LABEL)
    else:
        (droplets,) = [c for c in cloud.doks.clusters.values() if c.name == name]
        marked = [t for t in droplets.tags if t.startswith("better-compute-dev-deployment:")]
        assert marked
        droplets.tags = [t for t in droplets.tags if t not in marked]


async def deployment_b(world: World, tmp_path: Path, provider: str) -> World:
    """Deployment B: its own Compute on its own (SQLite) database, its tenant holding the same account."""
    url = f"sqlite:///{tmp_path / 'deployment-b.db'}"
    made = Database(url)
    await made.upgrade()
    await made.dispose()
    compute = world.cloud.compute(url, SECRET)
    tenant = await compute.iam.create_tenant("acme")
    ref = await compute.secrets.create(tenant.id, world.cloud.doks_token)
    b = World(world.cloud, compute, tenant.id, ref)
    document = b.document(provider)
    document["pools"] = []
    await compute.fleet.apply(document, tenant_id=tenant.id)
    return b


async def run_both(world: World, b: World, check: Any, what: str) -> None:
    """Step both deployments (B's reconcilers as well as A's) until `check()` holds."""
    deadline = world.cloud.clock.now() + timedelta(minutes=60)
    while not await check():
        assert world.cloud.clock.now() < deadline, f"not reached within 60 simulated minutes: {what}"
        await b.compute.run_until_idle(until=world.cloud.clock.now() + timedelta(seconds=15))
        await world.step(15)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_deployments_sweep_leaves_another_deployments_things_alone(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = world.document(provider)
    document["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = 1
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, PER_ZONE[provider]), what="A's Nodes joined", every=30)
    (a_cluster,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    a_pools = emulated(world, provider)[a_cluster.name]
    b = await deployment_b(world, tmp_path, provider)
    try:
        first = await sweep_b(b)
        assert first["orphans"] == [], "B lists nothing of A's"
        assert first["otherDeployments"] == 1 and first["deployment"]
        assert first["otherDeploymentsMessage"] == "1 things of other deployments left alone"
        a_id = await world.compute.module("kubernetes").context.deployment()  # type: ignore[attr-defined]
        assert first["deployment"] != a_id
        kept = await backup(b.compute.db)

        b_document = b.document(provider)
        b_document["pools"][0]["name"] = "gpu-b"
        await b.compute.fleet.apply(b_document, tenant_id=b.tenant_id)

        async def b_cluster_made() -> bool:
            clusters = await b.compute.kubernetes_clusters.list(tenant_id=b.tenant_id)
            if not clusters:
                return False
            pools = clusters[0].node_pools
            return clusters[0].status == "ready" and bool(pools) and all(p.status == "ready" for p in pools)

        await run_both(world, b, b_cluster_made, "B's cluster and node pools made")
        (b_cluster,) = await b.compute.kubernetes_clusters.list(tenant_id=b.tenant_id)
        await restore(b.compute.db, kept)  # B's record of its cluster is lost

        found = await sweep_b(b)
        (orphan,) = found["orphans"]
        assert (orphan["kind"], orphan["clusterId"]) == ("cluster", b_cluster.provider_cluster_id), found
        assert orphan["deployment"] == first["deployment"] and orphan["note"] is None
        assert found["otherDeployments"] == 1
        assert a_cluster.provider_cluster_id not in json.dumps(found), "nothing of A's is listed"

        unmark(world, provider, b_cluster.name)
        unmarked = await sweep_b(b)
        assert [(o["id"], o["deployment"], o["note"]) for o in unmarked["orphans"]] == [(orphan["id"], None, UNMARKED)]

        started = await sweep_b(b, "--delete", "--yes")
        assert [(d["id"], d["outcome"]) for d in started["deletions"]] == [(orphan["id"], "pending")]
        flavors = {p.name for p in b_cluster.node_pools}
        await world.until(
            lambda: _no_pools_left(world, provider, b_cluster.name, flavors), what="B's node pools gone", every=30
        )
        deleted = await sweep_b(b, "--delete", "--yes")
        assert deleted["deletions"] == [{"id": orphan["id"], "outcome": "deleted", "message": None}]
        assert deleted["after"]["orphans"] == [] and deleted["after"]["otherDeployments"] == 1
        assert {unmarked["deployment"], deleted["after"]["deployment"]} == {first["deployment"]}
        await world.until(lambda: _gone(world, provider, b_cluster.name), what="B's cluster gone", every=30)
        assert emulated(world, provider)[a_cluster.name] == a_pools, "A's cluster and node pools stay"
        assert await ready_and_joined(world, PER_ZONE[provider]), "A's pool is as it was"
    finally:
        await b.compute.close()


async def _no_pools_left(world: World, provider: str, name: str, flavors: set[str]) -> bool:
    return not flavors & emulated(world, provider).get(name, set())


async def _gone(world: World, provider: str, name: str) -> bool:
    return name not in emulated(world, provider)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_on_a_cluster_another_deployment_adopted_the_sweep_lists_nothing_of_its(
    world: World, provider: str, tmp_path: Path
) -> None:
    """A adopts someone's cluster (its claim, bcd, bc-substrate and node pool in it); B's sweep lists none of
    them, counting them as another deployment's, and its --delete has nothing to delete."""
    adopt_id = await seed(world, provider, "theirs")
    await world.compute.fleet.apply(adopting(world, provider, adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, PER_ZONE[provider]), what="A's adoption joined", every=30)
    before = emulated(world, provider)
    b = await deployment_b(world, tmp_path, provider)
    try:
        found = await sweep_b(b)
        assert found["orphans"] == [] and found["unreachable"] == [], found
        assert found["otherDeployments"] >= 2, found  # A's node pool, and what A runs in the cluster
        deleted = await sweep_b(b, "--delete", "--yes")
        assert deleted["deletions"] == [] and deleted["after"]["orphans"] == []
        assert emulated(world, provider) == before, "the cluster and A's node pool in it stay"
        claims = [
            o["metadata"]["labels"][SUBSTRATE_POOL_LABEL]
            for cluster in world.cloud.kube.clusters.values()
            for o in cluster.objects("ConfigMap", "kube-system")
            if o["metadata"]["name"] == "better-compute-substrate"
        ]
        pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
        assert claims == [pool.id], "A's claim stays"
        assert await ready_and_joined(world, PER_ZONE[provider]), "A's pool is as it was"
    finally:
        await b.compute.close()
