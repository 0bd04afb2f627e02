"""A converged fleet is quiet (issue 32): a full pass of every substrate and cluster, and the converged minutes
after it, make no provider write and exactly the Kubernetes writes the spec calls for.

The spec's Kubernetes writes of a substrate's run are bcd's objects (server-side applied: GKE's ResourceQuota,
the ConfigMap, the DaemonSet, GKE's driver installer) and the join Secret while a Node waits to join, deleted
once every Node joined. Once converged no Node waits and nothing of bcd differs from what the run would apply,
so the writes a converged run must make are none (`CONVERGED_WRITES`). Each run still reads bcd's objects, one
list a kind, and applies what someone changed (the last test). The fleet is examples/fleet.json: one pool on
each of GKE (with a Spot flavor), EKS (two zones) and DOKS.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from e2e_world import EXAMPLES, World
from sqlalchemy import update

from better_compute.engine.models import WorkItem
from better_compute.kubernetes.calls import CALLS, Call
from better_compute.kubernetes.names import CLUSTER_KIND, MANAGED_BY_KEY, MANAGED_BY_VALUE, SUBSTRATE_KIND
from better_compute.kubernetes.substrates.manifests import CONFIG_MAP, DAEMON_SET, NAMESPACE
from better_compute.testing.kube.operations import MERGE

CONVERGED_WRITES: Counter[str] = Counter()
"""The Kubernetes writes of a converged fleet's full pass, by method and resource: none (see the docstring)."""


def writes(calls: Counter[Call]) -> tuple[Counter[str], Counter[str]]:
    """(provider writes, Kubernetes writes), each by method."""
    provider = Counter({c.method: n for c, n in calls.items() if c.api != "kubernetes" and c.access == "write"})
    kube = Counter({c.method: n for c, n in calls.items() if c.api == "kubernetes" and c.access == "write"})
    return provider, kube


async def converged(world: World, pools: int) -> bool:
    views = [
        await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=p.id)
        for p in await world.compute.pools.list(world.tenant_id)
    ]
    return len(views) == pools and all(
        v.state == "ready" and v.nodes_listed and len(v.nodes_joined) == len(v.nodes_listed) for v in views
    )


async def full_pass(world: World) -> Counter[Call]:
    """Every substrate and cluster item due now, each run once: the calls they made."""
    compute = world.compute
    before = CALLS.snapshot()
    async with compute.db.transaction() as session:
        kinds = WorkItem.kind.in_((SUBSTRATE_KIND, CLUSTER_KIND))  # type: ignore[attr-defined]
        await session.execute(update(WorkItem).where(kinds).values(due_at=compute.clock.now()))
    await compute.run_until_idle()
    return CALLS.since(before)


async def up(world: World, document: dict[str, Any], pools: int) -> None:
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: converged(world, pools), minutes=60, what="every pool ready, every Node joined")
    await world.step(600)  # every Node joined: the next runs revoke the token and delete its Secret


async def test_a_converged_fleet_makes_no_provider_write_and_only_the_specs_kubernetes_writes(world: World) -> None:
    text = (EXAMPLES / "fleet.json").read_text().replace("secret://<tenant>/<id>", world.doks_token_ref)
    await up(world, json.loads(text), pools=3)

    made = await full_pass(world)
    assert writes(made) == (Counter(), CONVERGED_WRITES), made
    runs = Counter({c.api: n for c, n in made.items() if c.method == "credentials"})
    assert runs == Counter({"gcp": 1, "aws": 1, "digitalocean": 1}), "each substrate ran once (it mints per run)"
    looked = Counter({c.method: n for c, n in made.items() if c.api == "kubernetes" and c.access == "read"})
    assert looked["GET daemonsets"] == 3 and looked["GET configmaps"] == 3, "each run read bcd's objects"
    assert looked["GET resourcequotas"] == 1, "GKE's ResourceQuota is read, on GKE only"

    before = CALLS.snapshot()
    await world.step(600)
    quiet = CALLS.since(before)
    assert writes(quiet) == (Counter(), CONVERGED_WRITES), quiet
    assert sum(n for c, n in quiet.items() if c.method == "credentials") >= 3 * 5, "the settled runs went on"


async def test_a_converged_run_applies_again_only_what_someone_changed(world: World) -> None:
    await up(world, world.document("doks"), pools=1)
    (cluster,) = world.cloud.kube.clusters.values()
    daemon_sets, config_maps = cluster.resource("apps/v1", "DaemonSet"), cluster.resource("v1", "ConfigMap")
    cluster.ops.patch(
        daemon_sets,
        NAMESPACE,
        DAEMON_SET,
        {"metadata": {"labels": {MANAGED_BY_KEY: "someone"}}},  # not the pods' template: no rollout
        MERGE,
        manager="kubectl-edit",
    )
    assert writes(await full_pass(world)) == (Counter(), Counter({"PATCH daemonsets": 1}))
    daemon_set = cluster.get_object("DaemonSet", DAEMON_SET, NAMESPACE)
    assert daemon_set is not None and daemon_set["metadata"]["labels"][MANAGED_BY_KEY] == MANAGED_BY_VALUE

    cluster.ops.delete(config_maps, NAMESPACE, CONFIG_MAP)
    assert writes(await full_pass(world)) == (Counter(), Counter({"PATCH configmaps": 1}))
    assert cluster.get_object("ConfigMap", CONFIG_MAP, NAMESPACE) is not None
    assert writes(await full_pass(world)) == (Counter(), CONVERGED_WRITES)
