"""Kill the run right after a provider call or a Kubernetes write of an adopt, and of an adopted
cluster's teardown, on DOKS, GKE and EKS (`make test` samples the claim, the first provider write and
the last write of each phase on SQLite for DOKS, and one point a phase otherwise; BC_CRASH_SWEEP=all
tries every call of every provider on both stores); restart on the same database and converge: one
claim, one identity and one node pool of ours while adopted, and after the teardown none, with the
cluster still there.

A Kubernetes call's crash point is the call that follows it (the tally sees a Kubernetes call
as it is sent), so "after the Nth call" covers the moment after every write of either kind.

As the calls are counted (an adopt, then its teardown, in one world), the kth teardown point is tried
in the world of the kth adopt point once that converged; each crash is checked to come after the call
counted at its point. Under the sweep, a world a point.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from adopt_world import OWN_POOL, seed_cloud
from sqlalchemy import text
from test_crash_injection import PROVIDERS, Crash, Run, Stage, log_sweep, reclaimed, worlds_of

from better_compute.core.ids import new_id
from better_compute.kubernetes.calls import WRITES, Call, watch_calls
from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.store import Database
from better_compute.testing import Cloud, KubeCluster

SWEEP = os.environ.get("BC_CRASH_SWEEP") == "all"
POINTS_TRIED: list[str] = []


def adopting(reference: str, adopt_id: str, provider: str) -> dict[str, Any]:
    from test_crash_injection import document

    data = document(reference, provider)
    substrate = data["pools"][0]["policy"]["substrate"]
    substrate["cluster"] = {"adopt": adopt_id}
    substrate["flavors"][0]["nodes"] = 1
    return data


async def an_adopting_run(database: Database, cloud: Cloud, provider: str) -> tuple[Run, str]:
    cloud.kube.pod_runtime = None  # no bcd: ready needs only the apply
    # Each crash point's world has its own name: the points share one database, and GKE's and
    # EKS' adopt ids are the name.
    adopt_id = await seed_cloud(cloud, provider, f"theirs-{secrets.token_hex(3)}")
    run = Run(database, cloud, provider)
    tenant = await run.compute.iam.create_tenant(new_id("t").replace("_", "-"))
    run.tenant_id = tenant.id
    reference = await run.compute.secrets.create(tenant.id, cloud.doks_token)
    await run.compute.fleet.apply(adopting(reference, adopt_id, provider), tenant_id=tenant.id)
    return run, adopt_id


def is_write(call: Call) -> bool:
    return call.access == "write" if call.api == "kubernetes" else call.method in WRITES


@asynccontextmanager
async def crash_after(n: int) -> AsyncIterator[list[Call]]:
    """Raise Crash right after the nth call (provider or Kubernetes) is made; yields [that call] once it is."""
    seen = [0]
    armed = [False]
    nth: list[Call] = []

    async def observe(call: Call) -> None:
        seen[0] += 1
        if seen[0] == n:
            nth.append(call)
        if armed[0] or (seen[0] == n and call.api != "kubernetes"):
            raise Crash(f"after call {n}")
        armed[0] = seen[0] == n  # a Kubernetes call is seen as it is sent: crash at the next one

    with watch_calls(observe):
        yield nth


async def calls_of(work: Callable[[], Awaitable[None]]) -> list[Call]:
    made: list[Call] = []

    async def record(call: Call) -> None:
        made.append(call)

    with watch_calls(record):
        await work()
    return made


def kube_of(cloud: Cloud) -> KubeCluster:
    (cluster,) = cloud.kube.clusters.values()
    return cluster


def pools_at_the_provider(cloud: Cloud, provider: str, adopt_id: str) -> list[str] | None:
    """The node pools (node groups) of the adopted cluster at its provider; None once the cluster is gone."""
    if provider == "doks":
        found = cloud.doks.clusters.get(adopt_id)
        return None if found is None else [p.name for p in found.pools]
    where, name = adopt_id.split("/")
    if provider == "gke":
        record = cloud.gke.clusters.get(f"projects/my-project/locations/{where}/clusters/{name}")
        return None if record is None else list(record.node_pools)
    cluster = cloud.eks.world.clusters.get((where, name))
    return None if cluster is None else list(cluster.nodegroups)


def ours_at_the_provider(cloud: Cloud, provider: str, adopt_id: str) -> list[str]:
    return [name for name in pools_at_the_provider(cloud, provider, adopt_id) or () if name.startswith("bc-")]


async def _state(run: Run, state: str) -> bool:
    return await run.state() == state


async def _teardown(run: Run) -> None:
    await run.until(run.pool_archived)


async def _adopted(run: Run, cloud: Cloud, adopt_id: str) -> None:
    """Ready, with the flavor's node pool made (it follows the claim)."""
    await run.until(lambda: _has_pool(cloud, run.provider, adopt_id))
    await run.until(lambda: _state(run, "ready"))


async def crash_world(database: Database, provider: str, stages: list[Stage], calls: dict[str, list[Call]]) -> None:
    """One world through `stages` in turn: an adopt point, then, from where that converged, a teardown point."""
    with reclaimed():
        async with Cloud() as cloud:
            run, adopt_id = await an_adopting_run(database, cloud, provider)
            try:
                for phase, n in stages:
                    await crash_and_recover(run, cloud, adopt_id, phase, n, calls[phase][n - 1])
            finally:
                await run.compute.close()


async def crash_and_recover(run: Run, cloud: Cloud, adopt_id: str, phase: str, n: int, counted: Call) -> None:
    """Crash after call `n` (`counted`, as the calls were counted) of `phase`, restart, converge."""
    provider = run.provider
    if phase == "teardown":
        await _adopted(run, cloud, adopt_id)
        await run.compute.fleet.archive_pool("gpu-fleet", tenant_id=run.tenant_id)
    try:
        async with crash_after(n) as nth:
            with pytest.raises(Crash):
                await (_adopted(run, cloud, adopt_id) if phase == "adopt" else _teardown(run))
        assert nth == [counted], f"the crash came after {nth}, where {counted} was counted"
    finally:
        await run.compute.close()
    await run.restart()
    kube = kube_of(cloud)
    where = f"{provider} {phase} crash after call {n}"
    if phase == "adopt":
        await _adopted(run, cloud, adopt_id)
        claim = kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
        assert claim is not None, f"{where}: the claim is held"
        assert kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT) is not None
        assert len(ours_at_the_provider(cloud, provider, adopt_id)) == 1, f"{where}: one node pool"
    else:
        await _teardown(run)
        assert ours_at_the_provider(cloud, provider, adopt_id) == [], f"{where}: no node pool"
        assert kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is None, "no claim is leaked"
        assert kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT) is None, "no binding is leaked"
        assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is None
        assert OWN_POOL in (pools_at_the_provider(cloud, provider, adopt_id) or ()), "the cluster and its own pool stay"


async def _has_pool(cloud: Cloud, provider: str, adopt_id: str) -> bool:
    await cloud.advance(15)
    return len(ours_at_the_provider(cloud, provider, adopt_id)) == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a killed process leaves connections
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_crash_during_an_adopt_or_its_teardown_converges_and_leaks_nothing(
    database: Database, provider: str
) -> None:
    async with Cloud() as cloud:
        run, adopt_id = await an_adopting_run(database, cloud, provider)
        adopt = await calls_of(lambda: _adopted(run, cloud, adopt_id))
        await run.compute.fleet.archive_pool("gpu-fleet", tenant_id=run.tenant_id)
        teardown = await calls_of(lambda: _teardown(run))
        await run.compute.close()
    calls_of_phase = {"adopt": adopt, "teardown": teardown}
    points: dict[str, list[int]] = {}
    for phase, calls in calls_of_phase.items():
        last = len(calls) - 1  # a Kubernetes write that is the very last call has no next call to crash at
        writes = [i + 1 for i, call in enumerate(calls) if is_write(call) and i < last]
        provider_writes = [n for n in writes if calls[n - 1].api != "kubernetes"]
        if SWEEP:
            points[phase] = list(range(1, len(calls)))
        elif database.is_postgres or provider != "doks":
            points[phase] = provider_writes[:1]
        else:  # the claim (or the first write), the first provider write, and the last write
            points[phase] = sorted({writes[0], *provider_writes[:1], writes[-1]})
    tried = 0
    for stages in worlds_of(points):  # the kth adopt point, then from there the kth teardown point
        await crash_world(database, provider, stages, calls_of_phase)
        tried += len(stages)
        async with database.transaction() as session:  # that world is gone: its work must not run in the next
            await session.execute(text("DELETE FROM work_items"))
    assert tried == sum(map(len, points.values())) > 0
    POINTS_TRIED.append(f"{database.dialect} {provider} adopt: {tried} of {len(adopt) + len(teardown)} crash points")
    print(POINTS_TRIED[-1])  # the sweep's count (pytest -rP shows it)
    log_sweep([POINTS_TRIED[-1]])
