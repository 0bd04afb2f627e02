"""Each step's condition is saved with what the run found, under its lease, and the state read shows it
(`conditions`: name, status, message, since), in the HTTP dict and a row a step in `substrates get` (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from better_compute.cli.substrates import _steps
from better_compute.compute import compute_services
from better_compute.compute.changes import ChangeFeed
from better_compute.core.clock import SimClock
from better_compute.iam import Iam
from better_compute.kubernetes.substrates.service import KubernetesSubstrates, StepCondition
from better_compute.kubernetes.substrates.steps import StepResult
from better_compute.kubernetes.substrates.substrate_rows import Found, save_found, substrate_row
from better_compute.store import Database


class Lease:
    """A run that holds its lease: `guard` passes."""

    async def guard(self, session: Any) -> None:
        return None


async def test_the_state_read_shows_each_step_s_condition(database: Database, clock: SimClock) -> None:
    tenant = await Iam(database, clock).create_tenant("acme")
    compute = compute_services(database, clock)
    site = await compute.sites.create(tenant.id, "k8s", "shared", "us-east-1")
    pool = await compute.pools.create(tenant.id, "gpu-fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
    feed, run = ChangeFeed(database), Lease()
    async with database.transaction() as session:
        await substrate_row(session, pool, mode="create", now=clock.now())
    first = clock.now()
    results = (StepResult("nodes", "ok", "0 listed, 0 joined"), StepResult("bcd", "error", "applying: 503"))
    await save_found(feed, run, pool.id, Found("error", "applying: 503", conditions=results), first)
    clock.advance(60)
    results = (StepResult("nodes", "ok", "1 listed, 0 joined"), StepResult("bcd", "ok", "applied"))
    await save_found(feed, run, pool.id, Found("ready", conditions=results), clock.now())
    clock.advance(60)
    await save_found(feed, run, pool.id, Found("deleting", "tearing down"), clock.now())

    view = await KubernetesSubstrates(database, clock).get(tenant_id=tenant.id, pool_id=pool.id)
    assert view.conditions == (
        StepCondition("nodes", "ok", "1 listed, 0 joined", first),
        StepCondition("bcd", "ok", "applied", first + timedelta(seconds=60)),
    ), "a teardown's save leaves them; nodes kept its since, bcd's changed with its status"
    shown = view.to_dict()
    assert shown["conditions"][1] == {
        "name": "bcd",
        "status": "ok",
        "message": "applied",
        "since": view.conditions[1].since.isoformat(),  # type: ignore[union-attr]
    }
    assert _steps(shown) == [
        {"step": "nodes", "status": "ok", "since": first.isoformat(), "message": "1 listed, 0 joined"},
        {"step": "bcd", "status": "ok", "since": shown["conditions"][1]["since"], "message": "applied"},
    ], "substrates get prints a row a step"
