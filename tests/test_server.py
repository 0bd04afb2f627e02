"""better_compute(): builds a Compute, binds modules, checks itself, starts and closes."""

from __future__ import annotations

import asyncio
import typing
from pathlib import Path

import pytest
from fastapi import APIRouter

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.core.findings import Finding
from better_compute.core.module import ComputeLike
from better_compute.engine import Outcome, PermanentError, Reconciler, RunContext, TemporaryError
from better_compute.fleet.service import Fleet
from better_compute.gateway.service import Gateway
from better_compute.gateway.tokens import JoinTokens
from better_compute.kubernetes.clusters.service import KubernetesClusters
from better_compute.kubernetes.substrates.service import KubernetesSubstrates
from better_compute.kubernetes.sweep.service import KubernetesSweep
from better_compute.server import SERVICES, Compute, better_compute
from better_compute.vps.module import ProviderAccounts

SECRET = "s" * 40


class Counting:
    kind = "widget"

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.keys.append(key)
        return Outcome.done()


class WidgetModule:
    """A module as the protocol describes it: it attaches a service and brings a reconciler."""

    name = "widgets"

    def __init__(self) -> None:
        self.reconciler = Counting()
        self.bound: ComputeLike | None = None
        self.router = APIRouter()

    def bind(self, compute: ComputeLike) -> None:
        self.bound = compute
        compute.attach("widgets", {"bound": True})

    def reconcilers(self) -> list[Reconciler]:
        return [self.reconciler]

    def routers(self) -> list[APIRouter]:
        return [self.router]

    def self_check(self) -> list[Finding]:
        return [Finding("widgets.thin", "warning", "widgets are thin")]

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        return [Finding("widgets.fine", "info", "widgets answer")]


def test_the_default_database_is_a_sqlite_file_and_postgresql_urls_select_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    compute = better_compute(secret=SECRET)
    assert compute.db.dialect == "sqlite"
    assert compute.db.url.endswith("better-compute.db")
    assert better_compute(database="postgresql://u@h:5432/d", secret=SECRET).db.is_postgres


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ComputeError) as err:
        better_compute(database="sqlite:///x.db", secret="too-short")
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/secret")


def test_modules_are_bound_and_wired(tmp_path: Path) -> None:
    module = WidgetModule()
    compute = better_compute(database=f"sqlite:///{tmp_path}/c.db", secret=SECRET, modules=[module])
    assert module.bound is compute
    assert compute.service("widgets") == {"bound": True}
    assert compute.module("widgets") is module
    assert "widget" in compute.engine.kinds
    assert module.router in compute.routers()
    assert Finding("widgets.thin", "warning", "widgets are thin") in compute.self_check()
    with pytest.raises(AttributeError, match="module that provides it"):
        _ = compute.fleet
    with pytest.raises(AttributeError, match="module that provides it"):
        compute.service("sprockets")
    with pytest.raises(ComputeError) as err:
        compute.module("fleet")
    assert err.value.code == "NOT_FOUND"
    with pytest.raises(ValueError, match="already has"):
        compute.attach("widgets", object())
    with pytest.raises(ValueError, match="already has"):
        compute.attach("pools", object())


def test_the_modules_services_have_typed_accessors_on_compute_and_on_what_a_module_sees() -> None:
    """No `__getattr__` answering Any: `compute.fleet` is a property typed Fleet, so mypy checks
    every caller, and a module's ComputeLike declares the same accessors."""
    expected = {
        "gateway": Gateway,
        "join_tokens": JoinTokens,
        "provider_accounts": ProviderAccounts,
        "kubernetes_clusters": KubernetesClusters,
        "kubernetes_substrates": KubernetesSubstrates,
        "kubernetes_sweep": KubernetesSweep,
        "fleet": Fleet,
    }
    assert set(SERVICES) == set(expected)
    assert "__getattr__" not in vars(Compute) and "__getattr__" not in vars(ComputeLike)
    names = {kind.__name__: kind for kind in expected.values()}  # imported for type checking only
    for owner in (Compute, ComputeLike):
        found = {name: typing.get_type_hints(getattr(owner, name).fget, localns=names)["return"] for name in expected}
        assert found == expected, owner


def test_a_module_given_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ComputeError, match="given twice"):
        better_compute(database=f"sqlite:///{tmp_path}/c.db", secret=SECRET, modules=[WidgetModule(), WidgetModule()])


def test_core_services_are_attached(tmp_path: Path) -> None:
    compute = better_compute(database=f"sqlite:///{tmp_path}/c.db", secret=SECRET)
    for name in ("iam", "secrets", "sites", "pools", "nodes", "reservations", "quotas", "engine", "db", "clock"):
        assert getattr(compute, name) is not None
    # bcd's join and session endpoints come with every control plane.
    assert compute.module("gateway").name == "gateway"
    assert compute.join_tokens is not None
    assert [f.code for f in compute.self_check()] == ["store.sqlite-single-process"]


def test_a_bad_base_url_is_a_self_check_error(tmp_path: Path) -> None:
    compute = better_compute(database=f"sqlite:///{tmp_path}/c.db", secret=SECRET, base_url="ftp:/nowhere")
    assert [f.severity for f in compute.self_check() if f.code == "server.base-url-invalid"] == ["error"]


async def test_start_needs_a_current_schema_and_doctor_says_so(tmp_path: Path) -> None:
    compute = better_compute(database=f"sqlite:///{tmp_path}/fresh.db", secret=SECRET, modules=[WidgetModule()])
    try:
        with pytest.raises(ComputeError, match="db upgrade") as err:
            await compute.start()
        assert err.value.code == "INVALID_STATE"
        codes = {f.code: f.severity for f in await compute.doctor()}
        assert codes["store.schema-outdated"] == "error"
        assert "widgets.fine" not in codes
        await compute.migrate()
        codes = {f.code: f.severity for f in await compute.doctor()}
        assert "store.schema-outdated" not in codes
        assert codes["widgets.fine"] == "info"
    finally:
        await compute.close()


@pytest.mark.usefixtures("database")  # an empty, migrated database at database_url
async def test_compute_runs_module_reconcilers_until_idle(database_url: str) -> None:
    module = WidgetModule()
    clock = SimClock()
    compute = better_compute(database=database_url, secret=SECRET, modules=[module], clock=clock)
    try:
        await compute.engine.submit("widget", "w1")
        assert await compute.run_until_idle() == 1
        assert module.reconciler.keys == ["w1"]
    finally:
        await compute.close()


@pytest.mark.usefixtures("database")
async def test_start_serves_the_engine_and_close_stops_it(database_url: str) -> None:
    module = WidgetModule()
    compute: Compute = better_compute(database=database_url, secret=SECRET, modules=[module], clock=SimClock())
    await compute.start()
    try:
        with pytest.raises(ComputeError, match="started already"):
            await compute.start()
        await compute.engine.submit("widget", "w2")
        for _ in range(2000):
            if module.reconciler.keys:
                break
            await asyncio.sleep(0.001)
        assert module.reconciler.keys == ["w2"]
    finally:
        await compute.close()


class Lifecycle(WidgetModule):
    def __init__(self, name: str, events: list[str], *, fail: bool = False) -> None:
        super().__init__()
        self.name = name
        self.events = events
        self.fail = fail

    def bind(self, compute: ComputeLike) -> None:
        pass

    def reconcilers(self) -> list[Reconciler]:
        return []

    async def start(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot start")
        self.events.append(f"start {self.name}")

    async def close(self) -> None:
        self.events.append(f"close {self.name}")


@pytest.mark.usefixtures("database")
async def test_modules_start_in_order_and_close_in_reverse(database_url: str) -> None:
    events: list[str] = []
    modules = [Lifecycle("a", events), Lifecycle("b", events)]
    compute = better_compute(database=database_url, secret=SECRET, modules=modules, clock=SimClock())
    await compute.start()
    await compute.close()
    assert events == ["start a", "start b", "close b", "close a"]


@pytest.mark.usefixtures("database")
async def test_a_failed_start_closes_what_had_started(database_url: str) -> None:
    events: list[str] = []
    modules = [Lifecycle("a", events), Lifecycle("b", events, fail=True)]
    compute = better_compute(database=database_url, secret=SECRET, modules=modules, clock=SimClock())
    try:
        with pytest.raises(RuntimeError, match="b cannot start"):
            await compute.start()
        assert events == ["start a", "close a"]
    finally:
        await compute.close()


class Failing:
    kind = "widget"

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        if key == "stuck":
            raise PermanentError("the document names an account that does not exist")
        raise TemporaryError("provider busy", delay=60)


class FailingModule(WidgetModule):
    def reconcilers(self) -> list[Reconciler]:
        return [Failing()]


@pytest.mark.usefixtures("database")
async def test_doctor_reports_failing_work_items(database_url: str) -> None:
    compute = better_compute(database=database_url, secret=SECRET, modules=[FailingModule()], clock=SimClock())
    try:
        await compute.engine.submit("widget", "stuck")
        await compute.engine.submit("widget", "busy")
        await compute.run_until_idle()
        found = {f.code: f for f in await compute.doctor() if f.code.startswith("engine.")}
    finally:
        await compute.close()
    assert found["engine.item-stopped"].severity == "error"
    assert (
        "widget/stuck failed 1 time(s) in a row: PermanentError: the document names"
        in found["engine.item-stopped"].message
    )
    assert found["engine.item-retrying"].severity == "warning"
    assert "widget/busy" in found["engine.item-retrying"].message
