"""Kill the run right after the Nth provider call, restart, and converge: one cluster, nothing leaked.

Every provider call of a DOKS substrate's create-to-ready, and of its teardown, is a crash
point. The process "dies" (a BaseException the engine does not catch, leaving its lease
held); a new Compute on the same database (a restarted replica) takes the item over once
the lease expires, and must end with exactly one cluster (or, after a teardown, none).
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from e2e_world import EXAMPLES, SECRET
from sqlalchemy import text

from better_compute.kubernetes.calls import CALLS, WRITES, Call
from better_compute.server import Compute
from better_compute.store import Database
from better_compute.testing import Cloud

POINTS_TRIED: list[str] = []


class Crash(BaseException):
    """The process died right after a provider call."""


def document(reference: str) -> dict[str, Any]:
    import json

    text = (EXAMPLES / "fleet-doks.json").read_text().replace("secret://<tenant>/<id>", reference)
    data: dict[str, Any] = json.loads(text)
    return data


class Run:
    def __init__(self, database: Database, cloud: Cloud) -> None:
        self.database = database
        self.cloud = cloud
        self.providers = cloud.providers()
        self.compute = self.fresh()
        self.tenant_id = ""

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
        return len(self.cloud.doks.clusters)


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

    CALLS.observers.append(observe)
    try:
        yield seen
    finally:
        CALLS.observers.remove(observe)


async def calls_of(work: Callable[[], Awaitable[None]]) -> list[str]:
    """The provider calls `work` makes, in order."""
    made: list[str] = []

    async def record(call: Call) -> None:
        if call.api != "kubernetes":
            made.append(call.method)

    CALLS.observers.append(record)
    try:
        await work()
    finally:
        CALLS.observers.remove(record)
    return made


async def a_run(database: Database, cloud: Cloud) -> Run:
    cloud.kube.pod_runtime = None  # no bcd: crash points are provider calls, and ready needs only the apply
    run = Run(database, cloud)
    from better_compute.core.ids import new_id

    tenant = await run.compute.iam.create_tenant(new_id("t").replace("_", "-"))
    run.tenant_id = tenant.id
    reference = await run.compute.secrets.create(tenant.id, cloud.doks_token)
    await run.compute.fleet.apply(document(reference), tenant_id=tenant.id)
    return run


SWEEP = os.environ.get("BC_CRASH_SWEEP") == "all"
"""`make test` crashes after the first call of each kind in each phase on SQLite, and after the first
write of each phase on PostgreSQL (the store's part is the same); BC_CRASH_SWEEP=all after every call."""


async def crash_and_recover(database: Database, phase: str, n: int) -> None:
    async with Cloud() as cloud:
        run = await a_run(database, cloud)
        if phase == "teardown":
            await run.until(lambda: _is(run, "ready"))
            await run.compute.fleet.archive_pool("gpu-fleet", tenant_id=run.tenant_id)
        try:
            async with crash_after(n):
                with pytest.raises(Crash):
                    if phase == "create":
                        await run.until(lambda: _is(run, "ready"))
                    else:
                        await _teardown(run, archived=True)
        finally:
            await run.compute.close()
        await run.restart()
        try:
            if phase == "create":
                await run.until(lambda: _is(run, "ready"))
                assert run.clusters() == 1, f"create crash after call {n}: exactly one cluster"
                assert len(await run.compute.kubernetes_clusters.list(tenant_id=run.tenant_id)) == 1
            else:
                await _teardown(run, archived=True)
                assert run.clusters() == 0, f"teardown crash after call {n}: nothing left at the provider"
                assert await run.compute.nodes.list(run.tenant_id) == []
                assert await run.compute.kubernetes_clusters.list(tenant_id=run.tenant_id) == []
        finally:
            await run.compute.close()
            gc.collect()  # the crashed run's dropped connections are reclaimed here, not in a later test


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a killed process leaves connections
async def test_a_crash_after_a_provider_call_converges_to_one_cluster_and_leaks_nothing(database: Database) -> None:
    async with Cloud() as cloud:
        run = await a_run(database, cloud)
        create = await calls_of(lambda: run.until(lambda: _is(run, "ready")))
        teardown = await calls_of(lambda: _teardown(run))
        await run.compute.close()
    assert len(create) > 3 and len(teardown) > 3
    tried = 0
    for phase, calls in (("create", create), ("teardown", teardown)):
        first_of_each = {method: i + 1 for i, method in reversed(list(enumerate(calls)))}
        first_write = min(i + 1 for i, method in enumerate(calls) if method in WRITES)
        if SWEEP:
            points: list[int] = list(range(1, len(calls) + 1))
        elif database.is_postgres:
            points = [first_write]
        else:
            points = sorted(first_of_each.values())
        for n in points:
            await crash_and_recover(database, phase, n)
            tried += 1
            async with database.transaction() as session:  # that world is gone: its work must not run in the next
                await session.execute(text("DELETE FROM work_items"))
    POINTS_TRIED.append(f"{database.dialect}: {tried} of {len(create) + len(teardown)} crash points")


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

    async def observe(call: Call) -> None:
        if call.api != "kubernetes" and call.method == method:
            CALLS.observers.remove(observe)
            raise Crash(f"right after {method}")

    CALLS.observers.append(observe)
    try:
        yield
    finally:
        if observe in CALLS.observers:
            CALLS.observers.remove(observe)


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
    async with Cloud() as cloud:
        run = await made_then_archived(database, cloud)
        try:
            teardown = await calls_of(lambda: _nothing_left(run, "no crash"))
        finally:
            await run.compute.close()
            gc.collect()
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
                gc.collect()
    POINTS_TRIED.append(f"{database.dialect}: {len(points)} of {len(teardown)} points of a teardown that finds by name")
