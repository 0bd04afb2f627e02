"""`compute.kubernetes_clusters` (service.py, upgrades.py) and the rows behind it (records.py), on a
real store (SQLite and PostgreSQL) and the fake driver: what is listed, who may have a kubeconfig,
and which upgrades are refused before anything is recorded."""

from __future__ import annotations

from collections.abc import Awaitable

import pytest
import yaml
from clusters_world import TENANT, World, substrate
from sqlalchemy import select

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine.models import WorkItem
from better_compute.kubernetes.clusters.records import cluster_of, node_pool_rows
from better_compute.kubernetes.clusters.service import KubernetesClusters
from better_compute.kubernetes.clusters.upgrades import UpgradeProgress
from better_compute.kubernetes.names import SUBSTRATE_KIND
from better_compute.kubernetes.tables import ClusterRow
from better_compute.store import Database

ADOPT_ID = "4d3c2b1a-0000-4000-8000-000000000001"


async def refusal(call: Awaitable[object]) -> ComputeError:
    with pytest.raises(ComputeError) as caught:
        await call
    return caught.value


async def test_a_tenant_lists_and_gets_its_own_clusters_only(database: Database, clock: SimClock) -> None:
    world = World(database, clock)
    clusters = KubernetesClusters(world.k)
    cluster_id, provider_id = await world.up(policy=substrate(flavors=("h100", "h200")))
    (listed,) = await clusters.list(tenant_id=TENANT)
    assert (listed.id, listed.status, listed.provider_cluster_id) == (cluster_id, "ready", provider_id)
    assert [(p.flavor, p.status, p.node_count) for p in listed.node_pools] == [
        ("h100", "ready", 2),
        ("h200", "ready", 2),
    ]
    assert await clusters.list(tenant_id="t-other") == []
    error = await refusal(clusters.get(tenant_id="t-other", cluster_id=cluster_id))
    assert (error.code, error.path) == (ErrorCode.NOT_FOUND, "/clusterId"), "another tenant's cluster is not there"
    await world.set_cluster(cluster_id, status="deleted")
    assert await clusters.list(tenant_id=TENANT) == []
    assert [c.id for c in await clusters.list(tenant_id=TENANT, include_deleted=True)] == [cluster_id]


async def test_a_removed_flavor_leaves_the_record_at_once_and_comes_back_when_asked_again(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, _ = await world.up(policy=substrate(flavors=("h100", "h200")))
    await world.record(policy=substrate(flavors=("h200",)))
    async with database.session() as session:
        row = await session.get(ClusterRow, cluster_id)
        assert row is not None
        rows = await node_pool_rows(session, cluster_id)
        record = cluster_of(row, rows)
    assert [(p.flavor, p.delete_requested) for p in rows] == [("h100", True), ("h200", False)]
    assert [p.flavor for p in record.node_pools] == ["h200"], "a node pool being removed is not the cluster's"
    await world.record(policy=substrate(flavors=("h100", "h200")))
    assert [p.delete_requested for p in await world.node_pools(cluster_id)] == [False, False]


async def test_a_kubeconfig_is_given_for_a_ready_created_cluster_only_and_holds_a_fresh_credential(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    clusters = KubernetesClusters(world.k)
    cluster_id = await world.record()
    error = await refusal(clusters.credentials(tenant_id=TENANT, cluster_id=cluster_id))
    assert (error.code, error.message, error.path) == (
        ErrorCode.INVALID_STATE,
        "cluster bc-pool-0001 is pending",
        "/clusterId",
    )
    await world.run()
    row = await world.cluster(cluster_id)
    assert row.provider_cluster_id is not None
    world.driver.ready(row.provider_cluster_id)
    await world.next_run()
    config = yaml.safe_load(await clusters.credentials(tenant_id=TENANT, cluster_id=cluster_id))
    assert config["current-context"] == "bc-pool-0001"
    assert config["clusters"] == [
        {
            "name": "bc-pool-0001",
            "cluster": {"server": "https://bc-pool-0001.example", "certificate-authority-data": "Q0E="},
        }
    ]
    assert config["users"] == [{"name": "bc-pool-0001-admin", "user": {"token": "admin-token-0001"}}]
    assert world.driver.calls[-1] == "credentials", "minted for the operator who asked"
    async with database.session() as session:
        stored = [str(v) for r in await session.scalars(select(ClusterRow)) for v in vars(r).values()]
    assert not any("admin-token-0001" in v for v in stored), "never stored"


async def test_an_adopted_cluster_gets_no_kubeconfig_and_no_upgrade(database: Database, clock: SimClock) -> None:
    world = World(database, clock)
    clusters = KubernetesClusters(world.k)
    world.driver.seed(ADOPT_ID, "theirs")
    cluster_id = await world.record(policy=substrate(adopt=ADOPT_ID))
    await world.run()
    assert (await world.cluster(cluster_id)).status == "ready"
    error = await refusal(clusters.credentials(tenant_id=TENANT, cluster_id=cluster_id))
    assert (error.code, error.path) == (ErrorCode.INVALID_STATE, "/clusterId")
    assert "use the provider's own" in error.message
    error = await refusal(clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version="1.32"))
    assert (error.code, error.path) == (ErrorCode.INVALID_STATE, "/clusterId")
    assert "never changes a cluster it adopted" in error.message
    assert "upgrade_versions" not in world.driver.calls and "credentials" not in world.driver.calls


async def test_an_upgrade_is_checked_against_what_the_provider_offers_then_recorded_once(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    clusters = KubernetesClusters(world.k)
    cluster_id, _ = await world.up()
    for version in ("latest", "1", "1.32; drop"):
        error = await refusal(clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version=version))
        assert (error.code, error.path) == (ErrorCode.INVALID_INPUT, "/version"), version
    error = await refusal(clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version="1.34"))
    assert (error.code, error.path) == (ErrorCode.INVALID_INPUT, "/version")
    assert error.message.endswith("no upgrade to 1.34; offered: 1.32.1, 1.33.0")
    assert (await world.cluster(cluster_id)).upgrade is None, "a refused upgrade records nothing"
    world.driver.calls.clear()
    assert (await clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version="1.31")).upgrading_to is None
    assert world.driver.calls == [], "the version it runs already: nothing to ask"
    record = await clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version="1.32")
    assert record.upgrading_to == "1.32"
    upgrade = (await world.cluster(cluster_id)).upgrade
    assert upgrade is not None
    progress = UpgradeProgress.from_json(upgrade)
    assert (progress.to, progress.from_version, progress.started_at) == ("1.32", "1.31.2", clock.now().isoformat())
    async with database.session() as session:
        queued = await session.scalar(select(WorkItem).where(WorkItem.kind == SUBSTRATE_KIND))
    assert queued is not None and queued.due_at is not None and queued.due_at <= clock.now(), "the substrate drains"
    world.driver.calls.clear()
    await clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version="1.32")
    assert world.driver.calls == [], "the same version again is a no-op"
    error = await refusal(clusters.upgrade(tenant_id=TENANT, cluster_id=cluster_id, version="1.33"))
    assert (error.code, error.path) == (ErrorCode.INVALID_STATE, "/version")
    assert "under way" in error.message
