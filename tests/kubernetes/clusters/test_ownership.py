"""One cluster backs one pool, in the store: the per-account check when a substrate is recorded,
and the claim on a cluster's provider-global id (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine import Engine, Outcome, RunContext
from better_compute.kubernetes.clusters.claims import OTHER_TENANT, claim_global_id, release_global_claims
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
    answers: list[str | None] = []

    class Claimer:
        """Claims run inside a reconciler's run, under its lease: the key is `<pool>:<cluster>`."""

        kind = "claim"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            pool_id, cluster_id = key.split(":")
            answers.append(
                await claim_global_id(
                    database, ctx, "gid-1", tenant_id="t-1", pool_id=pool_id, cluster_id=cluster_id, now=now
                )
            )
            return Outcome.done()

    engine = Engine(database, clock, [Claimer()], owner="claimer", lease_seconds=60)

    async def claim(pool_id: str, cluster_id: str) -> str | None:
        await engine.submit("claim", f"{pool_id}:{cluster_id}")
        assert await engine.run_once() == 1
        return answers.pop()

    assert await claim("pool-a", "kcl-a") is None
    assert await claim("pool-a", "kcl-a") is None
    # the holder's cluster row is not this tenant's (here: there is none), so it is not named
    assert await claim("pool-b", "kcl-b") == OTHER_TENANT
    async with database.transaction() as session:
        await release_global_claims(session, "pool-b")  # not b's: stays
    assert await claim("pool-b", "kcl-b") == OTHER_TENANT
    async with database.transaction() as session:
        await release_global_claims(session, "pool-a")
    assert await claim("pool-b", "kcl-b") is None


async def test_a_cluster_row_is_never_reused_for_another_cluster_or_once_its_delete_was_asked(
    database: Database, clock: SimClock
) -> None:
    from sqlalchemy import update

    from better_compute.kubernetes.tables import ClusterRow

    await record(database, clock, "pool-first", ADOPT)
    with pytest.raises(ComputeError) as caught:
        await record(
            database, clock, "pool-first", {**ADOPT, "cluster": {"adopt": "4d3c2b1a-0000-4000-8000-00000000ffff"}}
        )
    assert caught.value.code is ErrorCode.CONFLICT and "another cluster" in caught.value.message
    async with database.transaction() as session:
        await session.execute(
            update(ClusterRow).where(ClusterRow.substrate_pool_id == "pool-first").values(delete_requested=True)
        )
    with pytest.raises(ComputeError) as caught:
        await record(database, clock, "pool-first", ADOPT)
    assert caught.value.code is ErrorCode.CONFLICT and "still being deleted" in caught.value.message
