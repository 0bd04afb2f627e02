"""`match_and_retire` retires only nodes that were there to be listed (SQLite and PostgreSQL).

The run takes its time, then lists the substrate's Nodes, then matches. A Node that comes up
after the list, and whose bcd joins (the pool node is made, `joining`, not connected yet)
before the match, is not in the list: it is left to the next run, never taken for gone. A
node that joined before the run and whose Node is not listed is gone, and retired.
"""

from __future__ import annotations

from datetime import timedelta

from better_compute.compute import ComputeServices, compute_services, register_node
from better_compute.compute.changes import ChangeFeed
from better_compute.core.clock import SimClock
from better_compute.engine import Engine, Outcome, RunContext
from better_compute.iam import Iam
from better_compute.kubernetes.substrates.nodes_step import ListedNode, NodesSeen, match_and_retire
from better_compute.store import Database


async def join(compute: ComputeServices, clock: SimClock, pool_id: str, name: str) -> str:
    """bcd on Node `name` joins: its pool node is made, `joining`, and not connected yet."""
    inventory = {"os": {"hostname": f"{name}.internal", "kubernetesNodeName": name}, "gpus": []}
    async with compute.reservations.transaction() as session:
        node = await register_node(session, now=clock.now(), pool_id=pool_id, name=name, inventory=inventory)
    return node.id


async def test_a_node_that_joins_after_the_list_is_not_retired(database: Database, clock: SimClock) -> None:
    tenant = await Iam(database, clock).create_tenant("acme")
    compute = compute_services(database, clock)
    site = await compute.sites.create(tenant.id, "k8s", "shared", "us-east-1")
    pool = await compute.pools.create(tenant.id, "gpu-fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
    gone = await join(compute, clock, pool.id, "node-gone")  # joined before the run; its Node is not listed
    clock.advance(60)
    late: list[str] = []
    seen: list[NodesSeen] = []

    class Substrate:
        """One substrate run's match: its time, its list, Nodes that join meanwhile, then the match."""

        kind = "substrate"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            now = clock.now()
            listed = [ListedNode("node-kept", spot=False, uid="uid-kept")]
            late.append(await join(compute, clock, pool.id, "node-same-instant"))  # at the run's own time
            clock.advance(1)
            late.append(await join(compute, clock, pool.id, "node-a-second-later"))
            seen.append(
                await match_and_retire(
                    ChangeFeed(database), ctx, tenant_id=tenant.id, pool_id=pool.id, listed=listed, now=now
                )
            )
            return Outcome.done()

    engine = Engine(database, clock, [Substrate()], owner="substrate", lease_seconds=60)
    await engine.submit("substrate", pool.id)
    assert await engine.run_once() == 1
    (found,) = seen
    assert found.retired == 1
    assert (await compute.nodes.get(tenant.id, gone)).state == "retired", "its Node was there to be listed"
    for node_id in late:
        assert (await compute.nodes.get(tenant.id, node_id)).state == "joining", "joined after the list: kept"
    assert found.waiting == ("node-kept",)
    assert clock.now() - found.first_waiting_seen_at == timedelta(seconds=1)  # type: ignore[operator]
