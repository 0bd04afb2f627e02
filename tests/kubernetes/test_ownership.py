"""One cluster backs one pool, in the store: the per-account check when a substrate is recorded,
and the claim on a cluster's provider-global id (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.clusters.claims import claim_global_id, release_global_claims
from better_compute.kubernetes.clusters.records import record_desired
from better_compute.kubernetes.desired import desired_substrate
from better_compute.store import Database

ADOPT = {
    "kind": "kubernetes",
    "account": "managed-k8s",
    "cluster": {"adopt": "4d3c2b1a-0000-4000-8000-000000000001"},
    "flavors": [{"name": "h100", "machineType": "gpu-h100x8-640gb", "nodes": 1}],
}


async def record(database: Database, clock: SimClock, pool_id: str, substrate: dict[str, object]) -> None:
    async with database.transaction() as session:
        await record_desired(
            session,
            now=clock.now(),
            tenant_id="t-1",
            pool_id=pool_id,
            provider="digitalocean",
            desired=desired_substrate(pool_id, substrate),
        )


async def test_a_second_pool_naming_the_same_account_and_cluster_is_refused_when_recorded(
    database: Database, clock: SimClock
) -> None:
    await record(database, clock, "pool-first", ADOPT)
    await record(database, clock, "pool-first", ADOPT)  # the same pool again is no second claimant
    with pytest.raises(ComputeError) as caught:
        await record(database, clock, "pool-second", ADOPT)
    assert caught.value.code is ErrorCode.CONFLICT
    assert "already backs pool pool-first" in caught.value.message
    assert caught.value.path == "/policy/substrate/cluster/adopt"
    other_account = {**ADOPT, "account": "other-k8s"}
    await record(database, clock, "pool-third", other_account)  # another account: the global id decides


async def test_a_global_id_is_claimed_once_and_given_back_by_its_pool(database: Database, clock: SimClock) -> None:
    now = clock.now()
    assert await claim_global_id(database, "gid-1", pool_id="pool-a", cluster_id="kcl-a", now=now) is None
    assert await claim_global_id(database, "gid-1", pool_id="pool-a", cluster_id="kcl-a", now=now) is None
    assert await claim_global_id(database, "gid-1", pool_id="pool-b", cluster_id="kcl-b", now=now) == "pool-a"
    async with database.transaction() as session:
        await release_global_claims(session, "pool-b")  # not b's: stays
    assert await claim_global_id(database, "gid-1", pool_id="pool-b", cluster_id="kcl-b", now=now) == "pool-a"
    async with database.transaction() as session:
        await release_global_claims(session, "pool-a")
    assert await claim_global_id(database, "gid-1", pool_id="pool-b", cluster_id="kcl-b", now=now) is None
