"""Apply on SQLite and PostgreSQL: one transaction, substrate work queued, prune, stale and blocked plans refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fleet_documents import DELETE, SUBSTRATE, edit, example
from fleet_store import Harness, harness

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet.plan import Action, Plan
from better_compute.store import Database


@pytest.fixture
async def h(database: Database, clock: SimClock) -> Harness:
    return await harness(database, clock)


def doc(h: Harness, provider: str = "gke") -> dict[str, Any]:
    return example(provider, tenant_id=h.tenant_id)


def with_pool(document: dict[str, Any], name: str) -> dict[str, Any]:
    other = copy.deepcopy(document["pools"][0])
    other["name"] = name
    return edit(document, "/pools", [*document["pools"], other])


async def test_apply_writes_the_desired_state_and_queues_the_substrate(h: Harness) -> None:
    plan = await h.fleet.apply(doc(h, "doks"), tenant_id=h.tenant_id)
    assert plan.counts()["create"] == 3
    assert await h.counts() == {
        "compute_sites": 1,
        "vps_provider_accounts": 1,
        "compute_pools": 1,
        "work_items": 1,
        "fleet_states": 1,
    }
    pool_id = plan.item("pool", "gpu-fleet")
    again = await h.fleet.plan(doc(h, "doks"), tenant_id=h.tenant_id)
    assert not again.has_changes
    stored = again.item("pool", "gpu-fleet")
    assert pool_id.id is None and stored.id is not None
    assert await h.work_keys() == [stored.id]
    assert h.wakes == [1]


async def test_the_stored_policy_is_the_documents_own_json(h: Harness) -> None:
    from better_compute.compute.pools import get_pool_by_name

    await h.fleet.apply(doc(h, "eks"), tenant_id=h.tenant_id)
    async with h.db.session() as session:
        pool = await get_pool_by_name(session, tenant_id=h.tenant_id, name="gpu-fleet")
    assert pool is not None
    assert pool.policy == {
        "kubernetes": {"platformOperated": True},
        "substrate": doc(h, "eks")["pools"][0]["policy"]["substrate"]
        | {"cluster": {"create": {"location": "us-east-1", "privateNodes": False}}}
        | {"flavors": [doc(h, "eks")["pools"][0]["policy"]["substrate"]["flavors"][0] | {"spot": False, "labels": {}}]},
    }


async def test_a_sizing_change_updates_in_place_and_requeues(h: Harness) -> None:
    first = await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    assert first.has_changes
    before = await h.counts()
    plan = await h.fleet.apply(edit(doc(h), f"{SUBSTRATE}/flavors/0/nodes", 4), tenant_id=h.tenant_id)
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE
    assert await h.counts() == before, "the same pool row and work item, updated in place"
    assert not (await h.fleet.plan(edit(doc(h), f"{SUBSTRATE}/flavors/0/nodes", 4), tenant_id=h.tenant_id)).has_changes
    assert len(h.wakes) == 2


async def test_apply_with_a_blocked_item_changes_nothing(h: Harness) -> None:
    await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    rows = await h.snapshot_rows()
    blocked = edit(doc(h), f"{SUBSTRATE}/cluster/create/location", "us-east4")
    blocked = edit(blocked, f"{SUBSTRATE}/flavors/0/nodes", 9)
    blocked = with_pool(edit(blocked, "/sites/0/region", "us-east4"), "second")
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(blocked, tenant_id=h.tenant_id)
    assert caught.value.code is ErrorCode.INVALID_STATE
    assert [p.path for p in caught.value.problems] == ["/pools/0"]
    assert "create a new pool instead" in caught.value.problems[0].message
    assert await h.snapshot_rows() == rows


async def test_a_saved_plan_applies_while_the_state_holds_and_is_refused_once_it_moved(h: Harness) -> None:
    await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    resized = edit(doc(h), f"{SUBSTRATE}/flavors/0/nodes", 3)
    saved = Plan.from_dict((await h.fleet.plan(resized, tenant_id=h.tenant_id)).to_dict())
    # Someone else applies first: the state moves.
    await h.fleet.apply(edit(doc(h), f"{SUBSTRATE}/flavors/0/nodes", 5), tenant_id=h.tenant_id)
    rows = await h.snapshot_rows()
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(tenant_id=h.tenant_id, plan=saved)
    assert caught.value.code is ErrorCode.CONFLICT
    assert await h.snapshot_rows() == rows
    fresh = Plan.from_dict((await h.fleet.plan(resized, tenant_id=h.tenant_id)).to_dict())
    applied = await h.fleet.apply(tenant_id=h.tenant_id, plan=fresh)
    assert applied.fingerprint == fresh.fingerprint and applied.items == fresh.items
    assert not (await h.fleet.plan(resized, tenant_id=h.tenant_id)).has_changes


async def test_a_saved_plan_is_refused_for_another_document_or_prune(h: Harness) -> None:
    saved = await h.fleet.plan(doc(h), tenant_id=h.tenant_id)
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(edit(doc(h), f"{SUBSTRATE}/flavors/0/nodes", 3), tenant_id=h.tenant_id, plan=saved)
    assert caught.value.code is ErrorCode.CONFLICT
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(doc(h), tenant_id=h.tenant_id, prune=True, plan=saved)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert await h.counts() == dict.fromkeys(await h.counts(), 0)


async def test_prune_and_no_prune_on_the_same_document(h: Harness) -> None:
    await h.fleet.apply(with_pool(doc(h), "old-fleet"), tenant_id=h.tenant_id)
    state = await h.fleet.plan(with_pool(doc(h), "old-fleet"), tenant_id=h.tenant_id)
    old_id = state.item("pool", "old-fleet").id
    keys_before = await h.work_keys()

    kept = await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    assert kept.item("pool", "old-fleet").action is Action.KEEP
    assert (await h.fleet.plan(doc(h), tenant_id=h.tenant_id)).item("pool", "old-fleet").action is Action.KEEP

    pruned = await h.fleet.apply(doc(h), tenant_id=h.tenant_id, prune=True)
    assert pruned.item("pool", "old-fleet").action is Action.DELETE
    after = await h.fleet.plan(doc(h), tenant_id=h.tenant_id, prune=True)
    assert [i.name for i in after.items if i.kind == "pool"] == ["gpu-fleet"]
    assert not after.has_changes
    async with h.db.session() as session:
        from better_compute.compute.pools import get_pool

        assert (await get_pool(session, tenant_id=h.tenant_id, pool_id=str(old_id))).state == "archiving"
    assert await h.work_keys() == keys_before, "the archived pool's substrate work item is due again"


async def test_taking_the_substrate_out_keeps_it_without_prune_and_tears_it_down_with_prune(h: Harness) -> None:
    from better_compute.compute.pools import get_pool_by_name

    await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    bare = edit(doc(h), SUBSTRATE, DELETE)
    kept = await h.fleet.apply(bare, tenant_id=h.tenant_id)
    assert kept.item("pool", "gpu-fleet").action is Action.KEEP
    async with h.db.session() as session:
        pool = await get_pool_by_name(session, tenant_id=h.tenant_id, name="gpu-fleet")
    assert pool is not None and "substrate" in pool.policy
    wakes = len(h.wakes)
    await h.fleet.apply(bare, tenant_id=h.tenant_id, prune=True)
    async with h.db.session() as session:
        pool = await get_pool_by_name(session, tenant_id=h.tenant_id, name="gpu-fleet")
    assert pool is not None and "substrate" not in pool.policy and pool.state == "active"
    assert len(h.wakes) == wakes + 1
    assert await h.work_keys() == [pool.id]


async def test_prune_deletes_unused_sites_and_accounts_once_their_pools_are_gone(h: Harness) -> None:
    bare = edit(edit(doc(h), "/pools", []), "/sites/0/name", "empty")
    await h.fleet.apply(bare, tenant_id=h.tenant_id)
    plan = await h.fleet.apply({"version": 1}, tenant_id=h.tenant_id, prune=True)
    assert {i.name: i.action for i in plan.items} == {"empty": Action.DELETE, "managed-k8s": Action.DELETE}
    counts = await h.counts()
    assert counts["compute_sites"] == 0 and counts["vps_provider_accounts"] == 0


async def test_an_account_config_change_requeues_the_pools_that_use_it(h: Harness) -> None:
    await h.fleet.apply(doc(h, "eks"), tenant_id=h.tenant_id)
    async with h.db.transaction() as session:
        from sqlalchemy import text

        await session.execute(text("DELETE FROM work_items"))
    plan = await h.fleet.apply(
        edit(doc(h, "eks"), "/providerAccounts/0/config/zones", ["us-east-1a"]), tenant_id=h.tenant_id
    )
    assert plan.item("account", "managed-k8s").action is Action.UPDATE
    assert plan.item("pool", "gpu-fleet").action is Action.UNCHANGED
    assert await h.work_keys() == [str(plan.item("pool", "gpu-fleet").id)]


async def test_pools_archive_starts_the_same_teardown(h: Harness) -> None:
    await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    pool = await h.fleet.archive_pool("gpu-fleet", tenant_id=h.tenant_id)
    assert pool.state == "archiving"
    assert await h.work_keys() == [pool.id]
    again = await h.fleet.archive_pool("gpu-fleet", tenant_id=h.tenant_id)
    assert (again.id, again.state) == (pool.id, "archiving"), "archiving twice is the same teardown"
    with pytest.raises(ComputeError) as caught:
        await h.fleet.archive_pool("no-such-pool", tenant_id=h.tenant_id)
    assert caught.value.code is ErrorCode.NOT_FOUND


async def test_an_invalid_document_writes_nothing(h: Harness) -> None:
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(edit(doc(h), "/pools/0/site", "nowhere"), tenant_id=h.tenant_id)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert await h.counts() == dict.fromkeys(await h.counts(), 0)


async def test_tenants_do_not_see_each_others_fleet(database: Database, clock: SimClock) -> None:
    one = await harness(database, clock, "one")
    two = await harness(database, clock, "two")
    await one.fleet.apply(example("gke", tenant_id=one.tenant_id), tenant_id=one.tenant_id)
    plan = await two.fleet.plan(example("gke", tenant_id=two.tenant_id), tenant_id=two.tenant_id)
    assert plan.counts()["create"] == 3
    with pytest.raises(ComputeError) as caught:
        await two.fleet.plan({"version": 1}, tenant_id="ten_missing")
    assert caught.value.code is ErrorCode.NOT_FOUND


async def test_concurrent_applies_of_one_tenant_run_one_after_the_other(h: Harness) -> None:
    import asyncio

    results = await asyncio.gather(
        h.fleet.apply(doc(h), tenant_id=h.tenant_id),
        h.fleet.apply(doc(h), tenant_id=h.tenant_id),
        return_exceptions=True,
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    created = sorted(r.counts()["create"] for r in results if isinstance(r, Plan))
    assert created == [0, 3], "the second apply planned against the state the first one left"
    assert (await h.counts())["compute_pools"] == 1


async def test_an_account_outlives_the_teardown_of_a_substrate_taken_out_of_a_pool(h: Harness) -> None:
    """Pruning the account together with the substrate would leave the teardown no way to reach
    the cluster: the account is held until the substrate reconciler releases it."""
    from better_compute.kubernetes.names import substrate_holder
    from better_compute.vps.accounts import delete_account, release_account_hold

    first = await h.fleet.apply(doc(h), tenant_id=h.tenant_id)
    assert first.has_changes
    stored = (await h.fleet.plan(doc(h), tenant_id=h.tenant_id)).item("pool", "gpu-fleet")
    assert stored.id is not None
    without = edit(edit(doc(h), SUBSTRATE, DELETE), "/providerAccounts", [])
    torn = await h.fleet.apply(without, tenant_id=h.tenant_id, prune=True)
    assert torn.item("pool", "gpu-fleet").action is Action.UPDATE
    account = torn.item("account", "managed-k8s")
    assert account.action is Action.KEEP
    assert any("gpu-fleet" in note for note in account.notes)
    assert (await h.counts())["vps_provider_accounts"] == 1

    again = await h.fleet.apply(without, tenant_id=h.tenant_id, prune=True)
    held = again.item("account", "managed-k8s")
    assert held.action is Action.KEEP
    assert any(substrate_holder(stored.id) in note for note in held.notes)
    assert (await h.counts())["vps_provider_accounts"] == 1

    async with h.db.transaction() as session:
        with pytest.raises(ComputeError) as err:
            await delete_account(session, tenant_id=h.tenant_id, account_id=str(account.id))
    assert err.value.code is ErrorCode.INVALID_STATE

    async with h.db.transaction() as session:
        await release_account_hold(session, holder=substrate_holder(stored.id))
    done = await h.fleet.apply(without, tenant_id=h.tenant_id, prune=True)
    assert done.item("account", "managed-k8s").action is Action.DELETE
    assert (await h.counts())["vps_provider_accounts"] == 0
