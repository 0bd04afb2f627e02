"""Kill the run right after the Nth provider call, restart, and converge: one cluster, nothing leaked.

Every provider call of a substrate's create-to-ready, of a scale (a flavor's `nodes` raised,
then lowered again), and of its teardown, on GKE, EKS and DOKS, is a crash point. The process "dies" (a BaseException the engine does not catch, leaving its lease
held); a new Compute on the same database (a restarted replica) takes the item over once
the lease expires, and must end with exactly one cluster (or, after a teardown, none).

The calls are counted in one world that goes through the create, the scale and the teardown in turn, and
the points are tried the same way: one world crashes at a create point, converges, crashes at a scale
point from there, converges, then at a teardown point (the next world at the next point of each), so a
create is made once for a point of each phase rather than once a point. Each crash is checked to come
right after the call that was counted at its point.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from e2e_world import EXAMPLES, SECRET
from sqlalchemy import text

from better_compute.kubernetes.calls import WRITES, Call, watch_calls
from better_compute.server import Compute
from better_compute.store import Database
from better_compute.testing import Cloud

POINTS_TRIED: list[str] = []


class Crash(BaseException):
    """The process died right after a provider call."""


PROVIDERS = ("doks", "gke", "eks")
NODES = 2
"""The examples' flavor `nodes`; the scale phase raises it by one and lowers it back."""
PER_ZONE = {"gke": 1, "eks": 2, "doks": 1}
"""Nodes one `nodes` makes: GKE's example pins one zone, EKS' account has subnets in two."""


def document(reference: str, provider: str = "doks", nodes: int = NODES) -> dict[str, Any]:
    import json

    text = (EXAMPLES / f"fleet-{provider}.json").read_text().replace("secret://<tenant>/<id>", reference)
    data: dict[str, Any] = json.loads(text)
    data["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = nodes
    return data


class Run:
    def __init__(self, database: Database, cloud: Cloud, provider: str = "doks") -> None:
        self.database = database
        self.cloud = cloud
        self.provider = provider
        self.providers = cloud.providers()
        self.compute = self.fresh()
        self.tenant_id = ""
        self.reference = ""

    def fresh(self) -> Compute:
        return self.cloud.compute(self.database.url, SECRET, providers=self.providers, lease_seconds=60)

    async def restart(self) -> None:
        """The dead process is gone; a new one starts on the same database after its lease ran out."""
        self.compute = self.fresh()
        self.cloud.clock.advance(61)

    async def until(self, check: Callable[[], Awaitable[bool]], minutes: float = 120) -> None:
        deadline = self.cloud.clock.now() + timedelta(minutes=minutes)
        while not await check():
            assert self.cloud.clock.now() < deadline, "did not converge"
            await self.compute.run_until_idle(until=self.cloud.clock.now() + timedelta(seconds=15))
            await self.cloud.settle()

    async def state(self) -> str:
        try:
            view = await self.compute.kubernetes_substrates.get(tenant_id=self.tenant_id, pool_id="gpu-fleet")
        except Exception:
            return "none"
        return str(view.state)

    async def pool_archived(self) -> bool:
        return (await self.compute.pools.list(self.tenant_id)) == []

    def clusters(self) -> int:
        """The clusters at the provider (of the emulator's own seeds, none)."""
        if self.provider == "gke":
            return len(self.cloud.gke.clusters)
        if self.provider == "eks":
            return len(self.cloud.eks.world.clusters)
        return len(self.cloud.doks.clusters)

    async def apply(self, nodes: int) -> None:
        """The operator sets the flavor's `nodes`."""
        await self.compute.fleet.apply(document(self.reference, self.provider, nodes), tenant_id=self.tenant_id)

    async def scaled(self, nodes: int) -> bool:
        """Ready, with one node pool, ready, whose Nodes the substrate lists are the flavor's `nodes`."""
        if await self.state() != "ready":
            return False
        view = await self.compute.kubernetes_substrates.get(tenant_id=self.tenant_id, pool_id="gpu-fleet")
        (cluster,) = await self.compute.kubernetes_clusters.list(tenant_id=self.tenant_id)
        pools = [(p.status, p.node_count) for p in cluster.node_pools]
        return pools == [("ready", nodes)] and len(view.nodes_listed) == nodes * PER_ZONE[self.provider]

    async def scale(self) -> None:
        """Raise the flavor's `nodes` by one, wait for the Node, lower it back, wait for it to go."""
        await self.apply(NODES + 1)
        await self.until(lambda: self.scaled(NODES + 1))
        await self.apply(NODES)
        await self.until(lambda: self.scaled(NODES))


@asynccontextmanager
async def crash_after(n: int, *, when: Callable[[], bool] = lambda: True) -> AsyncIterator[list[int]]:
    """Raise Crash right after the nth provider call counted while `when()` holds."""
    seen = [0]

    async def observe(call: Call) -> None:
        if call.api == "kubernetes" or not when():
            return
        seen[0] += 1
        if seen[0] == n:
            raise Crash(f"after provider call {n}: {call.method}")

    with watch_calls(observe):
        yield seen


async def calls_of(work: Callable[[], Awaitable[None]]) -> list[str]:
    """The provider calls `work` makes, in order."""
    made: list[str] = []

    async def record(call: Call) -> None:
        if call.api != "kubernetes":
            made.append(call.method)

    with watch_calls(record):
        await work()
    return made


async def a_run(database: Database, cloud: Cloud, provider: str = "doks") -> Run:
    cloud.kube.pod_runtime = None  # no bcd: crash points are provider calls, and ready needs only the apply
    run = Run(database, cloud, provider)
    from better_compute.core.ids import new_id

    tenant = await run.compute.iam.create_tenant(new_id("t").replace("_", "-"))
    run.tenant_id = tenant.id
    run.reference = await run.compute.secrets.create(tenant.id, cloud.doks_token)
    await run.apply(NODES)
    return run


SWEEP = os.environ.get("BC_CRASH_SWEEP") == "all"
"""BC_CRASH_SWEEP=all crashes after every call of every phase, on every provider and both stores.
`make test` keeps a sample (see `sample`)."""


def phases_tried(provider: str, *, postgres: bool) -> tuple[str, ...]:
    """Under the sweep every phase; `make test` leaves the scale to SQLite on DOKS (the store's part is the
    create's and the teardown's), so that it runs under a minute longer for the scale, GKE and EKS."""
    if SWEEP:
        return ("create", "scale", "teardown")
    return ("create", "scale", "teardown") if provider == "doks" and not postgres else ("create", "teardown")


def sample(provider: str, phase: str, calls: list[str], *, postgres: bool) -> list[int]:
    """The crash points a run tries: all of them under the sweep. Else, on DOKS, after the first call of
    each kind of its create and teardown on SQLite; after the first write of every other phase tried."""
    if SWEEP:
        return list(range(1, len(calls) + 1))
    if provider == "doks" and not postgres and phase != "scale":
        return sorted({method: i + 1 for i, method in reversed(list(enumerate(calls)))}.values())
    return [min(i + 1 for i, method in enumerate(calls) if method in WRITES)]


def log_sweep(lines: list[str]) -> None:
    """Under a long sweep, each phase's count and each failure as soon as it is known, in the file BC_CRASH_LOG
    names."""
    path = os.environ.get("BC_CRASH_LOG")
    if path:
        with Path(path).open("a") as out:
            out.write("".join(f"{line}\n" for line in lines))


STORES = ["sqlite", "postgres"] if SWEEP else ["sqlite"]
"""GKE and EKS are tried on PostgreSQL under the sweep; `make test` tries DOKS there."""


@contextmanager
def reclaimed() -> Iterator[None]:
    """Collect, on leaving, what was dropped inside (a crashed run's connections warn here, not in a later test),
    looking only at what was made inside: a full collection of a test worker's heap takes about a second."""
    gc.freeze()
    try:
        yield
    finally:
        gc.collect()
        gc.unfreeze()


Stage = tuple[str, int]
"""A phase and the provider call of it to crash after."""


def worlds_of(points: dict[str, list[int]]) -> list[list[Stage]]:
    """The crash points, as the worlds that try them: the kth world crashes at the kth point of its create, then
    (from where that converged) of its scale, then of its teardown, the phases in the order their calls were
    counted in; a world with no point left in a phase goes through it uncrashed. Under the sweep, a world a point."""
    if SWEEP:
        return [[(phase, n)] for phase, ns in points.items() for n in ns]
    return [
        [(phase, ns[k]) for phase, ns in points.items() if k < len(ns)] for k in range(max(map(len, points.values())))
    ]


async def crash_world(
    database: Database, stages: list[Stage], calls: dict[str, list[str]], provider: str, *, after_scale: bool
) -> None:
    """One world, through `stages` in turn. A teardown starts where it started when its calls were counted: once
    ready, or once the node pool is at the flavor's nodes (`after_scale`)."""
    with reclaimed():
        async with Cloud() as cloud:
            run = await a_run(database, cloud, provider)
            try:
                for phase, n in stages:
                    await crash_and_recover(run, phase, n, calls[phase][n - 1], after_scale=after_scale)
            finally:
                await run.compute.close()


async def crash_and_recover(run: Run, phase: str, n: int, method: str, *, after_scale: bool) -> None:
    """Crash after provider call `n` (`method`, as counted) of `phase`, restart, converge."""
    provider = run.provider
    if phase == "scale" or (phase == "teardown" and after_scale):
        await run.until(lambda: run.scaled(NODES))
    elif phase == "teardown":
        await run.until(lambda: _is(run, "ready"))
    if phase == "teardown":
        await run.compute.fleet.archive_pool("gpu-fleet", tenant_id=run.tenant_id)
    try:
        async with crash_after(n):
            with pytest.raises(Crash, match=f": {re.escape(method)}$"):  # the call counted, as the crash point
                if phase == "create":
                    await run.until(lambda: _is(run, "ready"))
                elif phase == "scale":
                    await run.scale()
                else:
                    await _teardown(run, archived=True)
    finally:
        await run.compute.close()
    await run.restart()
    where = f"{provider} {phase} crash after call {n}"
    if phase == "create":
        await run.until(lambda: _is(run, "ready"))
        assert run.clusters() == 1, f"{where}: exactly one cluster"
        assert len(await run.compute.kubernetes_clusters.list(tenant_id=run.tenant_id)) == 1
    elif phase == "scale":
        await run.apply(NODES)  # the operator's last word, whichever apply the crash came after
        await run.until(lambda: run.scaled(NODES))
        assert run.clusters() == 1, f"{where}: exactly one cluster, one node pool of the flavor's Nodes"
    else:
        await _teardown(run, archived=True)
        assert run.clusters() == 0, f"{where}: nothing left at the provider"
        assert await run.compute.nodes.list(run.tenant_id) == []
        assert await run.compute.kubernetes_clusters.list(tenant_id=run.tenant_id) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a killed process leaves connections
async def test_a_crash_after_a_provider_call_converges_to_one_cluster_and_leaks_nothing(database: Database) -> None:
    await crash_sweep(database, "doks")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("database_url", STORES, indirect=True)
@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p != "doks"])
async def test_a_crash_on_gke_or_eks_converges_to_one_cluster_and_leaks_nothing(
    database: Database, provider: str
) -> None:
    await crash_sweep(database, provider)


async def crash_sweep(database: Database, provider: str) -> None:
    """Crash after each sampled provider call of each phase, restart, and check what converged."""
    postgres = database.is_postgres
    tried_phases = phases_tried(provider, postgres=postgres)
    phases: dict[str, list[str]] = {}
    async with Cloud() as cloud:  # the calls each phase makes, with no crash
        run = await a_run(database, cloud, provider)
        phases["create"] = await calls_of(lambda: run.until(lambda: _is(run, "ready")))
        if "scale" in tried_phases:
            await run.until(lambda: run.scaled(NODES))  # where the scale starts from
            phases["scale"] = await calls_of(run.scale)
        phases["teardown"] = await calls_of(lambda: _teardown(run))
        await run.compute.close()
    assert all(len(calls) > 1 for calls in phases.values()), phases
    points = {phase: sample(provider, phase, calls, postgres=postgres) for phase, calls in phases.items()}
    report = [
        f"{database.dialect} {provider} {phase}: {len(points[phase])} of {len(calls)} crash points tried"
        for phase, calls in phases.items()
    ]
    log_sweep(report)
    tried = 0
    failed: list[str] = []
    for stages in worlds_of(points):
        try:
            await crash_world(database, stages, phases, provider, after_scale="scale" in phases)
        except (Exception, pytest.fail.Exception) as exc:
            if not SWEEP:
                raise
            ((phase, n),) = stages  # the sweep tries every one, a world each
            failed.append(f"{phase} after call {n} ({phases[phase][n - 1]}): {exc!r}"[:500])
            log_sweep(failed[-1:])
        tried += len(stages)
        async with database.transaction() as session:  # that world is gone: its work must not run in the next
            await session.execute(text("DELETE FROM work_items"))
    POINTS_TRIED.extend(report)
    print("\n".join([*report, *failed]))  # the sweep's count (pytest -rP shows it)
    assert failed == [], failed
    assert tried == sum(map(len, points.values())) > 0


async def _is(run: Run, state: str) -> bool:
    return await run.state() == state


async def _teardown(run: Run, *, archived: bool = False) -> None:
    if not archived:
        await run.compute.fleet.archive_pool("gpu-fleet", tenant_id=run.tenant_id)
    await run.until(run.pool_archived)
    await run.until(lambda: _gone(run))


async def _gone(run: Run) -> bool:
    await run.cloud.advance(60)
    return run.clusters() == 0


@asynccontextmanager
async def crash_right_after(method: str) -> AsyncIterator[None]:
    """Raise Crash right after the first `method` provider call returns."""

    crashed = [False]

    async def observe(call: Call) -> None:
        if not crashed[0] and call.api != "kubernetes" and call.method == method:
            crashed[0] = True
            raise Crash(f"right after {method}")

    with watch_calls(observe):
        yield


async def made_then_archived(database: Database, cloud: Cloud) -> Run:
    """The run dies right after the provider made the cluster, before its id is recorded; a new
    process starts at once (the dead one's lease on the cluster still runs) and the pool is archived."""
    run = await a_run(database, cloud)
    try:
        async with crash_right_after("ensure_cluster"):
            with pytest.raises(Crash):
                await run.until(lambda: _is(run, "ready"))
    finally:
        await run.compute.close()
    run.compute = run.fresh()
    [record] = await run.compute.kubernetes_clusters.list(tenant_id=run.tenant_id)
    assert record.provider_cluster_id is None and run.clusters() == 1, "made at the provider, not recorded"
    await run.compute.fleet.archive_pool("gpu-fleet", tenant_id=run.tenant_id)
    return run


async def _nothing_left(run: Run, what: str) -> None:
    await _teardown(run, archived=True)
    assert run.clusters() == 0, f"{what}: nothing left at the provider"
    assert await run.compute.kubernetes_clusters.list(tenant_id=run.tenant_id) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a killed process leaves connections
async def test_a_cluster_made_but_never_recorded_is_found_by_its_name_and_deleted_at_archive(
    database: Database,
) -> None:
    """A created cluster's row is marked deleted only once the provider was asked for the cluster's
    deterministic name and what is there is deleted; each call of that teardown is a crash point too."""
    with reclaimed():
        async with Cloud() as cloud:
            run = await made_then_archived(database, cloud)
            try:
                teardown = await calls_of(lambda: _nothing_left(run, "no crash"))
            finally:
                await run.compute.close()
    assert teardown[0] == "find_cluster", teardown
    if SWEEP:
        points = list(range(1, len(teardown) + 1))
    elif database.is_postgres:
        points = [min(i + 1 for i, method in enumerate(teardown) if method in WRITES)]
    else:
        points = sorted({method: i + 1 for i, method in reversed(list(enumerate(teardown)))}.values())
    for n in points:
        async with database.transaction() as session:  # the last world is gone: its work must not run here
            await session.execute(text("DELETE FROM work_items"))
        with reclaimed():
            async with Cloud() as cloud:
                run = await made_then_archived(database, cloud)
                try:
                    async with crash_after(n):
                        with pytest.raises(Crash):
                            await _teardown(run, archived=True)
                finally:
                    await run.compute.close()
                await run.restart()
                try:
                    await _nothing_left(run, f"a crash after teardown call {n} ({teardown[n - 1]})")
                finally:
                    await run.compute.close()
    POINTS_TRIED.append(f"{database.dialect}: {len(points)} of {len(teardown)} points of a teardown that finds by name")
    print(POINTS_TRIED[-1])
    log_sweep([POINTS_TRIED[-1]])


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_crash_between_removing_the_picked_machines_and_recording_the_count_removes_no_more(
    database: Database, provider: str
) -> None:
    """The substrate removed the Nodes a shrink picked and died before recording the lower count: the next
    process reads the provider's count, records it, and neither removes another machine nor resizes."""
    async with Cloud() as cloud:
        run = await a_run(database, cloud, provider)
        await run.apply(NODES + 1)
        await run.until(lambda: run.scaled(NODES + 1))
        await run.apply(NODES)
        try:
            async with crash_right_after("remove_machines"):
                with pytest.raises(Crash):
                    await run.until(lambda: run.scaled(NODES))
        finally:
            await run.compute.close()
        await run.restart()
        try:
            made = await calls_of(lambda: run.until(lambda: run.scaled(NODES)))
            assert "remove_machines" not in made and "resize_node_pool" not in made, made
            assert run.clusters() == 1
        finally:
            await run.compute.close()
