"""The clusters reconciler against its contract: a fake driver, a real store (SQLite and PostgreSQL),
the real engine and a SimClock, so every wait and retry is checked to the second."""

from __future__ import annotations

from clusters_world import SECOND_ACCOUNT, World, refused, substrate

from better_compute.core.clock import SimClock
from better_compute.core.errors import ErrorCode
from better_compute.engine import DELETE_BACKOFF
from better_compute.kubernetes.clusters.polling import poll_after
from better_compute.kubernetes.clusters.reconciler import DRIFT_SECONDS, POLL_SECONDS
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_KIND
from better_compute.kubernetes.provider import ClusterSpec
from better_compute.kubernetes.tables import ClusterClaimRow
from better_compute.store import Database


async def test_a_create_records_the_intent_first_then_polls_near_the_estimate_and_claims_the_global_id(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id = await world.record()
    row = await world.cluster(cluster_id)
    assert (row.status, row.provider_cluster_id, world.driver.clusters) == ("pending", None, {}), "the intent, first"
    await world.run()
    row = await world.cluster(cluster_id)
    assert world.driver.calls == ["ensure_cluster"]
    assert (row.status, row.provider_cluster_id) == ("provisioning", f"tor1/{row.name}")
    assert await world.due_in() == 0.9 * 300, "the first look comes near the provider's estimate"
    assert await world.next_run() == 270
    assert await world.due_in() == 0.05 * 270, "then at 5 % of the operation's age"
    assert world.driver.calls == ["ensure_cluster", "get_cluster"], "a run after the create finds it, never a second"
    world.driver.ready(f"tor1/{row.name}")
    woken = world.woken
    await world.next_run()
    row = await world.cluster(cluster_id)
    assert (row.status, row.endpoint, row.version, row.global_id) == (
        "ready",
        f"https://{row.name}.example",
        "1.31.2",
        f"gid/tor1/{row.name}",
    )
    async with database.session() as session:
        claim = await session.get(ClusterClaimRow, f"gid/tor1/{row.name}")
    assert claim is not None and claim.pool_id == "pool-0001", "the provider-global id is the pool's"
    due = (await world.item(SUBSTRATE_KIND)).due_at
    assert due is not None and due <= clock.now() and world.woken == woken + 1, "the substrate is woken: it is ready"
    assert await world.due_in() == DRIFT_SECONDS, "no node pool before the substrate holds the in-cluster claim"
    assert world.driver.calls.count("ensure_node_pool") == 0


async def test_node_pools_are_made_once_claimed_and_a_converged_cluster_is_only_read(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, _ = await world.up(policy=substrate(flavors=("h100", "h200")))
    assert world.driver.calls.count("ensure_node_pool") == 2
    assert [p.status for p in await world.node_pools(cluster_id)] == ["ready", "ready"]
    assert await world.due_in() == DRIFT_SECONDS
    world.driver.calls.clear()
    woken = world.woken
    await world.next_run()
    assert world.driver.calls == ["get_cluster", "get_node_pool", "get_node_pool"], "reads only"
    assert world.woken == woken, "nothing the substrate acts on changed: it is not woken"
    assert await world.due_in() == DRIFT_SECONDS


async def test_a_node_pool_being_made_is_looked_at_near_its_estimate(database: Database, clock: SimClock) -> None:
    world = World(database, clock)
    cluster_id = await world.record()
    await world.run()
    row = await world.cluster(cluster_id)
    assert row.provider_cluster_id is not None
    world.driver.ready(row.provider_cluster_id)
    await world.claimed(cluster_id)
    await world.run()
    assert [p.status for p in await world.node_pools(cluster_id)] == ["provisioning"]
    assert await world.due_in() == poll_after(0, 180) == 162


async def test_a_raised_count_resizes_in_place_and_a_lowered_one_waits_for_the_substrate(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, provider_id = await world.up()
    await world.record(policy=substrate(nodes=3))
    world.driver.calls.clear()
    await world.run()
    assert world.driver.calls == ["get_cluster", "get_node_pool", "resize_node_pool"]
    (pool,) = await world.node_pools(cluster_id)
    assert (pool.status, pool.node_count, world.driver.pools[provider_id, pool.name].node_count) == ("updating", 3, 3)
    assert await world.due_in() == poll_after(0, 60) == 54
    world.driver.pool_ready(provider_id, pool.name)
    await world.next_run()
    assert [p.status for p in await world.node_pools(cluster_id)] == ["ready"]
    assert await world.due_in() == DRIFT_SECONDS
    await world.record(policy=substrate(nodes=1))  # lower: the shrink step records it once its Nodes are gone
    world.driver.calls.clear()
    await world.run()
    assert "resize_node_pool" not in world.driver.calls
    assert [p.node_count for p in await world.node_pools(cluster_id)] == [3]


async def test_a_node_pool_of_another_shape_is_an_error_and_is_never_changed(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, provider_id = await world.up()
    (pool,) = await world.node_pools(cluster_id)
    made = world.driver.pools[provider_id, pool.name]
    world.driver.pools[provider_id, pool.name] = type(made)(
        name=made.name, status=made.status, machine_type="gpu-l40sx8", node_count=2
    )
    world.driver.calls.clear()
    await world.next_run()
    (pool,) = await world.node_pools(cluster_id)
    assert pool.status == "error"
    assert pool.message == (
        f"flavor h100: node pool {pool.name} is a gpu-l40sx8 and cannot become a gpu-h100x8-640gb in place; "
        "add a flavor with the new shape and remove this one"
    )
    assert world.driver.calls == ["get_cluster", "get_node_pool"]


async def test_a_refused_create_is_in_the_row_and_retried_by_the_engine(database: Database, clock: SimClock) -> None:
    world = World(database, clock)
    world.driver.refuse["ensure_cluster"] = refused("the account may run 3 clusters", reason="quotaExceeded")
    cluster_id = await world.record()
    await world.run()
    row = await world.cluster(cluster_id)
    assert (row.status, row.message) == ("error", "quotaExceeded: the account may run 3 clusters")
    item = await world.item()
    assert item.attempts == 1 and "the account may run 3 clusters" in (item.last_error or "")
    assert await world.next_run() == 1.0, "the engine's default backoff: 1 s"
    assert await world.due_in() == 2.0
    assert (await world.item()).attempts == 2
    del world.driver.refuse["ensure_cluster"]
    await world.next_run()
    item = await world.item()
    assert (item.attempts, item.last_error) == (0, None)
    assert (await world.cluster(cluster_id)).status == "provisioning"


async def test_a_refused_node_pool_says_why_and_leaves_the_other_flavors_alone(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id = await world.record(policy=substrate(flavors=("h100", "h200")))
    await world.run()
    row = await world.cluster(cluster_id)
    assert row.provider_cluster_id is not None
    world.driver.ready(row.provider_cluster_id)
    await world.claimed(cluster_id)
    made = world.driver.ensure_node_pool

    async def stockout_for_h100(account, provider_id, spec):  # type: ignore[no-untyped-def]
        if spec.name.endswith("h100"):
            world.driver.calls.append("ensure_node_pool")
            raise refused("gpu-h100x8-640gb is not available in tor1", reason="stockout")
        return await made(account, provider_id, spec)

    world.driver.ensure_node_pool = stockout_for_h100  # type: ignore[method-assign]
    await world.run()
    h100, h200 = await world.node_pools(cluster_id)
    assert (h100.status, h100.message) == ("error", "flavor h100: stockout: gpu-h100x8-640gb is not available in tor1")
    assert h200.status == "provisioning", "the other flavor's node pool is made all the same"
    assert (await world.cluster(cluster_id)).status == "ready"
    item = await world.item()
    assert item.attempts == 1 and "stockout: gpu-h100x8-640gb is not available" in (item.last_error or "")
    assert [await world.next_run() for _ in range(3)] == [1.0, 2.0, 4.0], "the engine's backoff, not a fixed poll"
    world.driver.ensure_node_pool = made  # type: ignore[method-assign]
    await world.next_run()
    assert [p.status for p in await world.node_pools(cluster_id)] == ["provisioning", "provisioning"]
    assert ((await world.item()).attempts, (await world.item()).last_error) == (0, None)


async def test_a_refused_node_pool_delete_is_the_clusters_error_and_backs_off_on_the_delete_schedule(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, provider_id = await world.up()
    world.driver.refuse["delete_node_pool"] = refused("the node pool has a PodDisruptionBudget", reason="inUse")
    await world.set_cluster(cluster_id, delete_requested=True)
    await world.engine.submit(CLUSTER_KIND, cluster_id)
    await world.run()
    (pool,) = await world.node_pools(cluster_id)
    row, item = await world.cluster(cluster_id), await world.item()
    assert pool.message == "flavor h100 (removing): inUse: the node pool has a PodDisruptionBudget"
    assert (row.status, row.message) == ("error", f"the provider refused to delete a node pool: {pool.message}")
    assert (item.attempts, row.next_attempt_at) == (1, item.due_at)
    assert [await world.next_run() for _ in range(3)] == [300, 600, 1200]
    assert "delete_cluster" not in world.driver.calls, "the cluster waits for its node pools"
    del world.driver.refuse["delete_node_pool"]
    await world.next_run()
    row, item = await world.cluster(cluster_id), await world.item()
    assert (row.status, row.message, row.next_attempt_at) == ("deleting", None, None)
    assert (item.attempts, await world.due_in()) == (0, POLL_SECONDS)
    world.driver.gone(provider_id, pool.name)
    await world.next_run()
    assert world.driver.calls[-1] == "delete_cluster"


async def test_a_busy_provider_is_asked_again_when_it_said_and_the_cluster_stays_deleting(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, provider_id = await world.up()
    busy = refused("another operation holds the cluster", reason="busy", code=ErrorCode.UNAVAILABLE)
    busy.retry_after = 30.0
    world.driver.refuse["delete_node_pool"] = busy
    await world.set_cluster(cluster_id, delete_requested=True)
    await world.engine.submit(CLUSTER_KIND, cluster_id)
    await world.run()
    row, item = await world.cluster(cluster_id), await world.item()
    assert (row.status, row.message, row.next_attempt_at) == ("deleting", None, None), "busy is no refusal to show"
    assert (item.attempts, await world.due_in()) == (1, 30.0)
    (pool,) = await world.node_pools(cluster_id)
    assert pool.message == "flavor h100 (removing): busy: another operation holds the cluster"
    del world.driver.refuse["delete_node_pool"]
    await world.next_run()
    assert world.driver.pools[provider_id, pool.name].status.value == "deleting"
    assert ((await world.item()).attempts, await world.due_in()) == (0, POLL_SECONDS)


async def test_a_removed_flavors_refused_delete_leaves_the_rest_converging_on_the_delete_schedule(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, provider_id = await world.up(policy=substrate(flavors=("h100", "h200")))
    world.driver.refuse["delete_node_pool"] = refused("the node pool is in use")
    await world.record(policy=substrate(flavors=("h200",)))
    await world.run()
    h100, h200 = await world.node_pools(cluster_id)
    assert (h100.delete_requested, h100.message) == (True, "flavor h100 (removing): the node pool is in use")
    assert h200.status == "ready" and (await world.cluster(cluster_id)).status == "ready"
    assert ((await world.item()).attempts, await world.due_in()) == (1, 300)
    del world.driver.refuse["delete_node_pool"]
    await world.next_run()
    assert (await world.node_pools(cluster_id))[0].status == "deleting"
    world.driver.gone(provider_id, h100.name)
    await world.next_run()
    assert [p.flavor for p in await world.node_pools(cluster_id)] == ["h200"], "its row goes with it"


async def test_a_refused_cluster_delete_backs_off_from_5_minutes_doubling_to_6_hours_then_finishes(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id, provider_id = await world.up()
    await world.set_cluster(cluster_id, delete_requested=True)
    await world.engine.submit(CLUSTER_KIND, cluster_id)
    world.driver.calls.clear()
    await world.run()
    assert world.driver.calls == ["get_cluster", "get_node_pool", "delete_node_pool"], "node pools first"
    assert ((await world.cluster(cluster_id)).status, await world.due_in()) == ("deleting", POLL_SECONDS)
    (pool,) = await world.node_pools(cluster_id)
    world.driver.gone(provider_id, pool.name)
    world.driver.refuse["delete_cluster"] = refused("the cluster has volumes attached", reason="inUse")
    waits = []
    await world.next_run()
    for attempt in range(1, 11):
        row, item = await world.cluster(cluster_id), await world.item()
        assert row.status == "error"
        assert row.message == "the provider refused to delete the cluster: inUse: the cluster has volumes attached"
        assert item.attempts == attempt, "each refusal is a failure the engine counts"
        assert row.next_attempt_at == item.due_at, "the row shows the engine's own next attempt"
        assert "inUse" in (item.last_error or "")
        waits.append(await world.next_run())
    minutes = [w / 60 for w in waits]
    assert minutes == [5, 10, 20, 40, 80, 160, 320, 360, 360, 360], "5 minutes, doubling, at most every 6 hours"
    assert waits == [DELETE_BACKOFF.delay(n) for n in range(1, 11)]
    del world.driver.refuse["delete_cluster"]
    await world.next_run()
    row, item = await world.cluster(cluster_id), await world.item()
    assert (row.status, row.message, row.next_attempt_at) == ("deleting", None, None)
    assert (item.attempts, item.last_error, await world.due_in()) == (0, None, POLL_SECONDS)
    world.driver.gone(provider_id)
    await world.next_run()
    assert (await world.cluster(cluster_id)).status == "deleted"
    assert await world.node_pools(cluster_id) == [] or all(
        p.status == "deleted" for p in await world.node_pools(cluster_id)
    )
    assert (await world.item()).due_at is None, "done: nothing more until it is queued again"


async def test_a_cluster_made_but_never_recorded_is_found_by_its_name_when_deleted(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id = await world.record()
    row = await world.cluster(cluster_id)
    await world.driver.ensure_cluster(None, _spec(row.name))  # type: ignore[arg-type]
    await world.set_cluster(cluster_id, delete_requested=True)  # the run died before recording the id
    world.driver.calls.clear()
    await world.run()
    assert world.driver.calls == ["find_cluster", "get_node_pool", "delete_cluster"]
    row = await world.cluster(cluster_id)
    assert (row.status, row.provider_cluster_id) == ("deleting", f"tor1/{row.name}")


async def test_an_adopted_cluster_is_read_never_deleted_and_a_refusal_retries_every_2_minutes(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    adopt_id = "4d3c2b1a-0000-4000-8000-000000000001"
    world.driver.refuse["read_adoptable"] = refused("the device plugin is on", reason="devicePluginOn")
    cluster_id = await world.record(policy=substrate(adopt=adopt_id))
    await world.run()
    row = await world.cluster(cluster_id)
    assert (row.status, row.message) == ("error", f"cannot adopt {adopt_id}: devicePluginOn: the device plugin is on")
    assert [await world.next_run() for _ in range(3)] == [120, 120, 120], "the 2 minute adopt retry"
    assert (await world.item()).attempts == 4
    del world.driver.refuse["read_adoptable"]
    world.driver.seed(adopt_id, "theirs")
    await world.next_run()
    assert (await world.cluster(cluster_id)).status == "ready"
    assert (await world.item()).attempts == 0
    await world.claimed(cluster_id)
    await world.run()
    (pool,) = await world.node_pools(cluster_id)
    world.driver.pool_ready(adopt_id, pool.name)
    await world.set_cluster(cluster_id, delete_requested=True)
    await world.engine.submit(CLUSTER_KIND, cluster_id)
    await world.run()
    world.driver.gone(adopt_id, pool.name)
    await world.next_run()
    assert (await world.cluster(cluster_id)).status == "deleted"
    assert "delete_cluster" not in world.driver.calls and adopt_id in world.driver.clusters, "the cluster stays"


async def test_an_adopted_cluster_that_is_gone_is_an_error_retried_every_2_minutes(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    adopt_id = "4d3c2b1a-0000-4000-8000-000000000001"
    world.driver.seed(adopt_id, "theirs")
    cluster_id = await world.record(policy=substrate(adopt=adopt_id))
    await world.run()
    assert (await world.cluster(cluster_id)).status == "ready"
    del world.driver.clusters[adopt_id]  # someone deleted their cluster
    await world.next_run()
    row, item = await world.cluster(cluster_id), await world.item()
    assert (row.status, row.message) == ("error", f"the adopted cluster {adopt_id} was not found")
    assert item.attempts == 1 and await world.due_in() == 120
    assert await world.next_run() == 120 and (await world.item()).attempts == 2


async def test_an_adopted_cluster_never_claimed_is_left_without_a_provider_call(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    cluster_id = await world.record(policy=substrate(adopt="4d3c2b1a-0000-4000-8000-000000000001"))
    await world.set_cluster(cluster_id, delete_requested=True)
    await world.run()
    assert (await world.cluster(cluster_id)).status == "deleted"
    assert world.driver.calls == []


async def test_a_global_id_another_pool_holds_is_an_error_and_no_node_pool_is_made(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    _, provider_id = await world.up("pool-first")
    second = await world.record("pool-second", {**substrate(adopt=provider_id), "account": SECOND_ACCOUNT})
    await world.run()
    row = await world.cluster(second)
    assert row.status == "error"
    assert row.message == (
        f"cluster {provider_id} (gid/{provider_id}) already backs pool pool-first, reached through another provider "
        "account: one cluster backs one pool; nothing was created in it"
    )
    assert await world.node_pools(second) != [] and world.driver.calls.count("ensure_node_pool") == 1
    assert await world.next_run(key=second) == 120 and (await world.item(key=second)).attempts == 2


async def test_a_run_for_a_row_that_is_gone_is_done_and_an_unknown_account_is_retried(
    database: Database, clock: SimClock
) -> None:
    world = World(database, clock)
    await world.engine.submit(CLUSTER_KIND, "kcl-missing")
    await world.run()
    gone = await world.item(key="kcl-missing")
    assert (gone.due_at, gone.attempts) == (None, 0)
    cluster_id = await world.record(policy={**substrate(), "account": "other"})
    await world.run()
    item = await world.item(key=cluster_id)
    assert item.attempts == 1 and "no provider account named 'other'" in (item.last_error or "")
    assert await world.due_in(key=cluster_id) == 1.0
    assert world.driver.calls == []


def _spec(name: str) -> ClusterSpec:
    return ClusterSpec(name=name, location="tor1")
