"""The orphan sweep against a database restored from an older backup (GKE, EKS, DOKS; SQLite and PostgreSQL).

A fleet is applied, the database copied (the backup), more applied (another pool: a cluster of its
own, or in the adopted world another owner's cluster adopted), and the backup restored. The sweep,
through the CLI and HTTP with --json, then finds exactly what was made after the backup; deleting
it removes it at the emulators, a delete repeated finds nothing to do, and doctor says
`kubernetes.orphans-found` until it is gone. In the adopted world the owners' own clusters and node
pools stay as they were.
"""

from __future__ import annotations

import copy
import json
import ssl
from typing import Any

import httpx
import pytest
from adopt_world import OWN_POOL, PER_ZONE, adopting, cli, ready_and_joined, seed
from e2e_world import World
from sqlalchemy import select

from better_compute.kubernetes.provider import SUBSTRATE_POOL_LABEL, adopted_node_pool_name
from better_compute.store import Base, Database

ACCOUNT = "managed-k8s"
LATER = "gpu-later"

Backup = dict[str, list[dict[str, Any]]]


async def backup(db: Database) -> Backup:
    """Every table's rows, as a dump would hold them."""
    async with db.engine.connect() as conn:
        return {t.name: [dict(r._mapping) for r in await conn.execute(select(t))] for t in Base.metadata.sorted_tables}


async def restore(db: Database, rows: Backup) -> None:
    """Every table back to the backup's rows, in one transaction, as restoring a dump does."""
    async with db.engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            await conn.execute(table.delete())
        for table in Base.metadata.sorted_tables:
            if rows[table.name]:
                await conn.execute(table.insert(), rows[table.name])


def emulated(world: World, provider: str) -> dict[str, set[str]]:
    """Cluster name -> its node pools' names, as the provider's emulator holds them."""
    cloud = world.cloud
    if provider == "gke":
        return {c.name: set(c.node_pools) for c in cloud.gke.clusters.values()}
    if provider == "eks":
        return {c.name: set(c.nodegroups) for c in cloud.eks.world.clusters.values()}
    return {c.name: {p.name for p in c.pools} for c in cloud.doks.clusters.values()}


def with_pool(document: dict[str, Any], entry: dict[str, Any], name: str) -> dict[str, Any]:
    """The document with another pool like `entry`, called `name`."""
    later = copy.deepcopy(document)
    added = copy.deepcopy(entry)
    added["name"] = name
    later["pools"].append(added)
    return later


async def sweep_over_http(world: World, key: str, method: str, path: str, **body: Any) -> dict[str, Any]:
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        answer = await http.request(
            method,
            path,
            json=body or None,
            params={"account": ACCOUNT} if method == "GET" else None,
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


async def sweep_over_cli(world: World, *flags: str) -> dict[str, Any]:
    result = await cli(world, "sweep", "--account", ACCOUNT, "--json", *flags)
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)
    return found


async def bad_requests(world: World, key: str) -> None:
    """A delete naming nothing, or not by id, or an account the tenant has not: refused, naming the field."""
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        auth = {"Authorization": f"Bearer {key}"}
        for body, path in (({"ids": []}, "/ids"), ({"ids": [7]}, "/ids/0"), ({"ids": ["x"], "extra": 1}, "/extra")):
            answer = await http.post("/v1/sweep/delete", json=body, headers=auth, timeout=60)
            assert answer.status_code == 400, answer.text
            assert path in {p["path"] for p in answer.json()["error"]["problems"]}, answer.text
        unknown = await http.get("/v1/sweep", params={"account": "nobody"}, headers=auth, timeout=60)
        assert unknown.status_code == 404 and unknown.json()["error"]["path"] == "/account", unknown.text


async def orphans_found(world: World) -> list[str]:
    return [f.message for f in await world.compute.doctor() if f.code == "kubernetes.orphans-found"]


async def gone_at_the_provider(world: World, provider: str, check: Any) -> None:
    async def gone() -> bool:
        return bool(check(emulated(world, provider)))

    await world.until(gone, minutes=60, what="the orphans are gone at the provider", every=30)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_sweep_finds_and_deletes_the_cluster_made_after_the_backup(world: World, provider: str) -> None:
    document = world.document(provider)
    entry = document["pools"][0]
    entry["policy"]["substrate"]["flavors"][0]["nodes"] = 1
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(
        lambda: ready_and_joined(world, PER_ZONE[provider]), what="the first pool's Nodes joined", every=30
    )
    kept = await backup(world.compute.db)
    (first,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)

    await world.compute.fleet.apply(with_pool(document, entry, LATER), tenant_id=world.tenant_id)
    await world.until(
        lambda: ready_and_joined(world, PER_ZONE[provider], LATER), what="the later pool joined", every=30
    )
    later = next(c for c in await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) if c.id != first.id)
    assert set(emulated(world, provider)) >= {first.name, later.name}
    await restore(world.compute.db, kept)
    _, key = await world.compute.iam.create_api_key(world.tenant_id)

    over_cli = await sweep_over_cli(world)
    over_http = await sweep_over_http(world, key, "GET", "/v1/sweep")
    for found in (over_cli, over_http):
        assert found["accounts"] == [ACCOUNT] and found["unreachable"] == []
        (orphan,) = found["orphans"]
        assert (orphan["kind"], orphan["name"], orphan["clusterId"]) == (
            "cluster",
            later.name,
            later.provider_cluster_id,
        )
        assert orphan["poolId"] == later.substrate_pool_id
        assert set(orphan["holds"]) >= {p.name for p in later.node_pools}
    (message,) = await orphans_found(world)
    assert orphan["id"] in message and "--delete" in message

    refused = await cli(world, "sweep", "--account", ACCOUNT, "--delete", answer="n\n")
    assert refused.exit_code == 1 and "Sweep cancelled: nothing was deleted." in refused.stdout, refused.output
    assert "Delete these 1?" in refused.output and "cluster" in refused.stdout  # the table, as wide as the terminal
    assert (await sweep_over_cli(world))["orphans"] == over_cli["orphans"], "a refused delete changes nothing"
    await bad_requests(world, key)

    flavors = {p.name for p in later.node_pools}
    started = await sweep_over_cli(world, "--delete", "--yes")
    (pending,) = started["deletions"]
    assert (pending["id"], pending["outcome"]) == (orphan["id"], "pending"), "its node pools go first"
    assert all(name in pending["message"] for name in flavors)
    await gone_at_the_provider(world, provider, lambda clusters: not flavors & clusters.get(later.name, set()))
    deleted = await sweep_over_cli(world, "--delete", "--yes")
    assert deleted["deletions"] == [{"id": orphan["id"], "outcome": "deleted", "message": None}]
    assert deleted["after"]["orphans"] == []
    assert await orphans_found(world) == []
    again = await sweep_over_http(world, key, "POST", "/v1/sweep/delete", ids=[orphan["id"]])
    assert again["deletions"] == [
        {"id": orphan["id"], "outcome": "absent", "message": "the sweep does not find it now"}
    ]
    await gone_at_the_provider(world, provider, lambda clusters: later.name not in clusters)
    assert first.name in emulated(world, provider), "the cluster the restored records own stays"
    assert await ready_and_joined(world, PER_ZONE[provider])


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_in_an_adopted_world_the_sweep_takes_back_only_ours(world: World, provider: str) -> None:
    first_id = await seed(world, provider, "theirs")
    later_id = await seed(world, provider, "theirs-later")
    owners = copy.deepcopy(emulated(world, provider))
    assert all(pools == {OWN_POOL} for pools in owners.values()) and len(owners) == 2
    document = adopting(world, provider, first_id)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, PER_ZONE[provider]), what="the first adoption joined", every=30)
    kept = await backup(world.compute.db)

    entry = copy.deepcopy(document["pools"][0])
    entry["policy"]["substrate"]["cluster"] = {"adopt": later_id}
    await world.compute.fleet.apply(with_pool(document, entry, LATER), tenant_id=world.tenant_id)
    await world.until(
        lambda: ready_and_joined(world, PER_ZONE[provider], LATER), what="the later adoption joined", every=30
    )
    later_pool = await world.compute.pools.get_by_name(world.tenant_id, LATER)
    view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=later_pool.id)
    assert view.cluster is not None and view.cluster.provider_cluster_id is not None
    later_cluster = view.cluster.provider_cluster_id
    ours = adopted_node_pool_name(later_pool.id, "h100")
    await restore(world.compute.db, kept)
    _, key = await world.compute.iam.create_api_key(world.tenant_id)

    expected = {
        f"nodePool:{ACCOUNT}:{later_cluster}:{ours}",
        f"bcd:{ACCOUNT}:{later_cluster}:{later_pool.id}",
        f"identity:{ACCOUNT}:{later_cluster}",
        f"claim:{ACCOUNT}:{later_cluster}",
    }
    over_http = await sweep_over_http(world, key, "GET", "/v1/sweep")
    over_cli = await sweep_over_cli(world)
    for found in (over_http, over_cli):
        assert {o["id"] for o in found["orphans"]} == expected, found
        assert all(o["poolId"] in (later_pool.id, None) for o in found["orphans"])

    deleted = await sweep_over_http(world, key, "POST", "/v1/sweep/delete", ids=sorted(expected))
    assert [d["id"].split(":")[0] for d in deleted["deletions"]] == ["bcd", "nodePool", "identity", "claim"]
    assert {d["outcome"] for d in deleted["deletions"]} == {"deleted"}, deleted
    await gone_at_the_provider(world, provider, lambda clusters: ours not in clusters["theirs-later"])
    assert (await sweep_over_cli(world))["orphans"] == []
    first_pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    assert emulated(world, provider) == {
        "theirs": {OWN_POOL, adopted_node_pool_name(first_pool.id, "h100")},
        "theirs-later": {OWN_POOL},
    }, "the owners' clusters and their own node pools stay; only the pool the restored records own is ours"
    claims = [
        o["metadata"]["labels"][SUBSTRATE_POOL_LABEL]
        for cluster in world.cloud.kube.clusters.values()
        for o in cluster.objects("ConfigMap", "kube-system")
        if o["metadata"]["name"] == "better-compute-substrate"
    ]
    assert claims == [first_pool.id]
    left = [
        o["metadata"]["name"]
        for cluster in world.cloud.kube.clusters.values()
        for kind in ("DaemonSet", "ConfigMap", "Secret")
        for o in cluster.objects(kind, "bc-system", labels={SUBSTRATE_POOL_LABEL: later_pool.id})
    ]
    assert left == []
    assert await ready_and_joined(world, PER_ZONE[provider]), "the pool the restored records own is as it was"
