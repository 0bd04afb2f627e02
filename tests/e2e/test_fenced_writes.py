"""A substrate run that lost its lease makes no cluster write once it resumes.

Replica A's run of the substrate pauses at its first Kubernetes read (the Node list) while
its process is stalled (its lease renewals do not get through). The lease runs out, replica
B takes the item over and runs it; then A resumes. Its next step is a write (retire, the
bcd apply, the join Secret), and `ctx.fence()` stops it before the write is sent.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from datetime import timedelta

from e2e_world import SECRET, World
from sqlalchemy import text

from better_compute.core.clock import SimClock
from better_compute.engine import Engine
from better_compute.fleet import fleet_module
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.calls import Call, watch_calls
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_KIND
from better_compute.kubernetes.tables import SubstrateRow
from better_compute.server import Compute, better_compute
from better_compute.store import Database
from better_compute.vps import vps


class StalledLeases:
    """Replica A's way to the database's clock, paused at that await while A is stalled."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.open = asyncio.Event()
        self.open.set()

    async def now(self, session: object) -> object:
        await self.open.wait()
        return self.clock.now()


async def test_a_substrate_run_that_lost_its_lease_writes_nothing_to_the_cluster(
    world: World, database: Database
) -> None:
    world.cloud.kube.pod_runtime = None  # no bcd: the substrate is ready once bcd is applied
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")

    async def ready() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool.id)
        return str(view.state) == "ready"

    deadline = world.cloud.clock.now() + timedelta(minutes=60)
    while not await ready():  # a minute a step: the emulators' timers are what the clock runs through
        assert world.cloud.clock.now() < deadline, "the substrate never became ready"
        await world.compute.run_until_idle(until=world.cloud.clock.now() + timedelta(seconds=60))
        await world.cloud.settle()
    providers = world.cloud.providers()
    replica_b = better_compute(
        database=database.url,
        secret=SECRET,
        clock=world.cloud.clock,
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=world.cloud.substrate_agent())),
            fleet_module(),
        ],
    )
    a = world.compute.engine
    stalled = StalledLeases(world.cloud.clock)
    a.lease_clock = stalled  # type: ignore[assignment]
    paused, resume = asyncio.Event(), asyncio.Event()
    phase = "armed"  # armed -> paused (A waits at its Node list) -> b (B runs) -> resumed (A again)
    writes_by_a: list[Call] = []

    async def observe(call: Call) -> None:
        nonlocal phase
        if call.api != "kubernetes":
            return
        if phase == "armed" and call.access == "read":
            phase = "paused"
            paused.set()
            await resume.wait()
        elif phase == "resumed" and call.access == "write":
            writes_by_a.append(call)

    try:
        with watch_calls(observe):
            async with database.transaction() as session:  # only the substrate is due now
                await session.execute(text("UPDATE work_items SET due_at = NULL WHERE lock_token IS NULL"))
            await a.submit(SUBSTRATE_KIND, pool.id)
            run_a = asyncio.create_task(a.run_once())
            await asyncio.wait_for(paused.wait(), 30)
            stalled.open.clear()
            world.cloud.clock.advance(a.lease_seconds + 1)
            phase = "b"
            assert await replica_b.engine.run_once() == 1, "B takes over the item whose lease ran out"
            phase = "resumed"
            stalled.open.set()
            resume.set()
            assert await asyncio.wait_for(run_a, 30) == 1
    finally:
        await replica_b.close()
    assert writes_by_a == [], "A's run was fenced off before its cluster writes"
    assert a.stale == 1


class StalledAfterClaim:
    """Replica A's way to the database's clock: its claim gets through, then every later read
    (the run's fence) waits until the test opens it again."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.reads = 0
        self.paused = asyncio.Event()
        self.open = asyncio.Event()

    async def now(self, session: object) -> object:
        self.reads += 1
        if self.reads > 1:
            self.paused.set()
            await self.open.wait()
        return self.clock.now()


async def test_a_cluster_run_that_lost_its_lease_leaves_the_new_owners_record_as_it_is(
    world: World, database: Database
) -> None:
    """A stalls at its fence before the create; B takes the item over, creates the cluster and records
    its id; A resumes, its fence raises, and it writes nothing: the id and status stay B's."""
    world.cloud.kube.pod_runtime = None
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    a = world.compute.engine
    assert await a.run_once() == 1, "the substrate records the cluster it wants"
    async with database.transaction() as session:  # only the cluster is due now
        await session.execute(text("UPDATE work_items SET due_at = NULL WHERE kind != :kind"), {"kind": CLUSTER_KIND})
    providers = world.cloud.providers()
    replica_b = better_compute(
        database=database.url,
        secret=SECRET,
        clock=world.cloud.clock,
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=world.cloud.substrate_agent())),
            fleet_module(),
        ],
    )
    stalled = StalledAfterClaim(world.cloud.clock)
    a.lease_clock = stalled  # type: ignore[assignment]
    try:
        run_a = asyncio.create_task(a.run_once())
        await asyncio.wait_for(stalled.paused.wait(), 30)
        assert world.cloud.doks.clusters == {}, "A stalled at its fence, before the create"
        world.cloud.clock.advance(a.lease_seconds + 1)
        assert await replica_b.engine.run_once() == 1, "B takes over the item whose lease ran out"
        [made] = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
        assert made.provider_cluster_id is not None and made.status == "provisioning"
        stalled.open.set()
        assert await asyncio.wait_for(run_a, 30) == 1
    finally:
        await replica_b.close()
    assert a.stale == 1
    [after] = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    assert (after.provider_cluster_id, after.status) == (made.provider_cluster_id, "provisioning"), (
        "the run that lost its lease wrote nothing over the new owner's record"
    )
    assert len(world.cloud.doks.clusters) == 1


A_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar("a_run", default=False)
"""Set in replica A's run (and the tasks it starts), so the hook pauses only A's calls."""


async def as_a(engine: Engine) -> int:
    A_RUN.set(True)
    return await engine.run_once()


def replica(world: World, database: Database) -> Compute:
    providers = world.cloud.providers()
    return better_compute(
        database=database.url,
        secret=SECRET,
        clock=world.cloud.clock,
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=world.cloud.substrate_agent())),
            fleet_module(),
        ],
    )


async def only_due(database: Database, kind: str) -> None:
    """Every other idle item waits: the next claim takes only `kind`'s."""
    async with database.transaction() as session:
        await session.execute(
            text("UPDATE work_items SET due_at = NULL WHERE lock_token IS NULL AND kind != :kind"), {"kind": kind}
        )


async def substrate_record(database: Database, pool_id: str) -> dict[str, object]:
    async with database.session() as session:
        row = await session.get(SubstrateRow, pool_id)
        assert row is not None
        return {column.name: getattr(row, column.name) for column in SubstrateRow.__table__.columns}


async def stale_run_over_b(
    world: World,
    database: Database,
    pause_at: Callable[[Call], bool],
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, object]:
    """A runs the substrate and pauses at its first Kubernetes call `pause_at` picks; A stalls, its
    lease runs out, B takes the item over and runs it; A resumes. Returns the substrate's record
    as B left it (read before A resumed)."""
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    replica_b = replica(world, database)
    a = world.compute.engine
    stalled = StalledLeases(world.cloud.clock)
    a.lease_clock = stalled  # type: ignore[assignment]
    paused, resume = asyncio.Event(), asyncio.Event()

    async def observe(call: Call) -> None:
        if A_RUN.get() and not paused.is_set() and call.api == "kubernetes" and pause_at(call):
            paused.set()
            await resume.wait()

    try:
        with watch_calls(observe):
            await only_due(database, SUBSTRATE_KIND)
            await a.submit(SUBSTRATE_KIND, pool.id)
            run_a = asyncio.create_task(as_a(a))
            await asyncio.wait_for(paused.wait(), 30)
            stalled.open.clear()
            if meanwhile is not None:
                await meanwhile()
            world.cloud.clock.advance(a.lease_seconds + 1)
            await only_due(database, SUBSTRATE_KIND)
            assert await replica_b.engine.run_once() == 1, "B takes over the item whose lease ran out"
            left_by_b = await substrate_record(database, pool.id)
            stalled.open.set()
            resume.set()
            assert await asyncio.wait_for(run_a, 30) == 1
    finally:
        await replica_b.close()
    assert a.stale == 1
    return left_by_b


async def test_a_substrate_run_that_lost_its_lease_after_its_last_fence_saves_nothing(
    world: World, database: Database
) -> None:
    """A passes its last fence, then stalls at the join Secret's read; B runs the substrate. A resumes:
    its save of what it found is refused, and the record stays as B left it."""
    world.cloud.kube.pod_runtime = None  # no bcd: the Nodes wait, so the run keeps a join token
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")

    async def ready() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool.id)
        return str(view.state) == "ready"

    await world.until(ready, minutes=60, every=60, what="the substrate is ready")
    left_by_b = await stale_run_over_b(world, database, lambda call: call.method == "GET secrets")
    assert await substrate_record(database, pool.id) == left_by_b, "A's save wrote nothing over B's"


async def test_a_teardown_run_that_lost_its_lease_leaves_the_new_owners_state_as_it_is(
    world: World, database: Database
) -> None:
    """A's teardown counts one booking, then stalls at its first cluster call; the booking ends and B's
    teardown goes on to delete the cluster. A resumes: it does not write its stale "waiting for 1
    booking" over B's state."""
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)

    async def joined() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
        return view.state == "ready" and len(view.nodes_joined) == 2

    await world.until(joined, minutes=60, what="every Node joined")
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    booking = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    bare = world.document("doks")
    del bare["pools"][0]["policy"]["substrate"]
    await world.compute.fleet.apply(bare, tenant_id=world.tenant_id, prune=True)

    async def booking_ends() -> None:
        await world.compute.reservations.release(world.tenant_id, booking.id)

    left_by_b = await stale_run_over_b(world, database, lambda call: True, booking_ends)
    assert left_by_b["message"] == "deleting the node pools and the cluster", "B saw the booking end"
    assert await substrate_record(database, pool.id) == left_by_b, "A's stale count wrote nothing over B's state"
