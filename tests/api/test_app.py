"""The HTTP API: health, metrics, API-key auth, the JSON error body, the lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from pydantic import BaseModel
from stub_modules import StubModule

from better_compute.api import create_app
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.core.ids import new_id
from better_compute.engine import Outcome, RunContext
from better_compute.server import Compute, better_compute
from better_compute.store import Database

SECRET = "a-test-secret-of-at-least-32-characters"


class Thing(BaseModel):
    name: str
    size: int


class Echo:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.keys: list[str] = []

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.keys.append(key)
        return Outcome.done()


class ProbeModule(StubModule):
    """Routes that raise, validate and skip auth, so the app's handling of each shows."""

    name = "probe"
    public_prefixes = ("/v1/probe-public",)

    def __init__(self, kind: str = "echo") -> None:
        self.echo = Echo(kind)
        super().__init__(self.echo)

        @self.router.get("/v1/probe/missing")
        async def missing() -> None:
            raise ComputeError("NOT_FOUND", "no pool 'p-1'", "/poolId")

        @self.router.get("/v1/probe/busy")
        async def busy() -> None:
            raise ComputeError("UNAVAILABLE", "provider throttling", retry_after=2.5)

        @self.router.post("/v1/probe/things")
        async def things(thing: Thing) -> dict[str, int]:
            return {"size": thing.size}

        @self.router.get("/v1/probe-public/ping")
        async def ping() -> dict[str, str]:
            return {"pong": "yes"}


@dataclass
class Api:
    compute: Compute
    client: httpx.AsyncClient
    probe: ProbeModule


@pytest.fixture
async def api(database: Database, database_url: str) -> AsyncIterator[Api]:
    probe = ProbeModule()
    compute = better_compute(database=database_url, secret=SECRET, modules=[probe], clock=SimClock())
    app = create_app(compute)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield Api(compute, client, probe)


async def _key(compute: Compute) -> tuple[str, str]:
    tenant = await compute.iam.create_tenant(new_id("tenant").replace("_", "-"))  # unique: PostgreSQL is shared
    _, plain = await compute.iam.create_api_key(tenant.id)
    return tenant.id, plain


async def test_healthz_needs_no_key(api: Api) -> None:
    health = await api.client.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})


def _sample(text: str, line_start: str) -> float:
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
    return found[0] if found else 0.0


async def test_metrics_count_reconcile_runs_per_kind(api: Api) -> None:
    runs = 'better_compute_reconcile_runs_total{kind="echo",result="done"}'
    durations = 'better_compute_reconcile_duration_seconds_count{kind="echo"}'
    before = (await api.client.get("/metrics")).text
    await api.compute.engine.submit("echo", "counted")
    async with asyncio.timeout(10):
        while "counted" not in api.probe.echo.keys:
            await asyncio.sleep(0.001)
    async with asyncio.timeout(10):
        while _sample((after := (await api.client.get("/metrics")).text), runs) < _sample(before, runs) + 1:
            await asyncio.sleep(0.001)
    assert _sample(after, durations) == _sample(before, durations) + 1
    assert "# TYPE better_compute_reconcile_errors_total counter" in after


async def test_a_missing_or_bad_key_is_refused_before_the_route(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer bck_nope"}, {"Authorization": "Basic abc"}):
        response = await api.client.get("/v1/probe/missing", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "PERMISSION_DENIED"


async def test_a_valid_key_names_its_tenant(api: Api) -> None:
    tenant_id, plain = await _key(api.compute)
    response = await api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {plain}"})
    assert response.status_code == 200
    assert response.json()["tenantId"] == tenant_id
    assert plain not in response.text


async def test_compute_errors_become_json_with_their_status(api: Api) -> None:
    _, plain = await _key(api.compute)
    auth = {"Authorization": f"Bearer {plain}"}
    missing = await api.client.get("/v1/probe/missing", headers=auth)
    assert missing.status_code == 404
    assert missing.json() == {"error": {"code": "NOT_FOUND", "message": "no pool 'p-1'", "path": "/poolId"}}
    busy = await api.client.get("/v1/probe/busy", headers=auth)
    assert busy.status_code == 503
    assert busy.headers["retry-after"] == "3"
    assert busy.json()["error"]["retryAfter"] == 2.5


async def test_invalid_bodies_report_every_problem_by_json_pointer(api: Api) -> None:
    _, plain = await _key(api.compute)
    response = await api.client.post(
        "/v1/probe/things", json={"size": "big"}, headers={"Authorization": f"Bearer {plain}"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert sorted(p["path"] for p in error["problems"]) == ["/name", "/size"]


async def test_module_public_prefixes_skip_the_key_check(api: Api) -> None:
    response = await api.client.get("/v1/probe-public/ping")
    assert (response.status_code, response.json()) == (200, {"pong": "yes"})


async def test_the_lifespan_runs_the_engine_workers(api: Api) -> None:
    await api.compute.engine.submit("echo", "e1")
    async with asyncio.timeout(10):
        while api.probe.echo.keys != ["e1"]:
            await asyncio.sleep(0.001)


async def test_two_serving_apps_share_one_postgresql(postgres_database: str) -> None:
    """Two `serve` processes against one PostgreSQL: every item runs once, none twice."""
    kind = new_id("echo")
    probes = [ProbeModule(kind), ProbeModule(kind)]
    computes = [better_compute(database=postgres_database, secret=SECRET, modules=[p]) for p in probes]
    apps = [create_app(c) for c in computes]
    async with apps[0].router.lifespan_context(apps[0]), apps[1].router.lifespan_context(apps[1]):
        for n in range(40):
            await computes[n % 2].engine.submit(kind, f"item-{n}")
        async with asyncio.timeout(20):
            while len(probes[0].echo.keys) + len(probes[1].echo.keys) < 40:
                await asyncio.sleep(0.005)
    ran = probes[0].echo.keys + probes[1].echo.keys
    assert sorted(ran) == sorted(f"item-{n}" for n in range(40))


@pytest.mark.parametrize(
    "unusable",
    [
        "postgresql://postgres@127.0.0.1:1/nothing-listens-here",
        "sqlite:////nonexistent-directory/better-compute.db",
    ],
    ids=["postgresql-down", "sqlite-unopenable"],
)
async def test_a_database_it_cannot_use_answers_503_with_retry_after_not_a_500(
    unusable: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The API-key check reads the database first; what the database said goes to the log in one
    line, and the caller learns only to retry."""
    key = "bck_" + "a" * 26 + "_" + "K" * 43  # well formed, so the check asks the database
    compute = better_compute(database=unusable, secret=SECRET, modules=[ProbeModule()], clock=SimClock())
    transport = httpx.ASGITransport(app=create_app(compute), raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            for request in (
                client.build_request("GET", "/v1/whoami", headers={"Authorization": f"Bearer {key}"}),
                client.build_request("GET", "/v1/pools", headers={"Authorization": f"Bearer {key}"}),
            ):
                response = await client.send(request)
                assert response.status_code == 503, response.text
                assert response.headers["retry-after"] == "1"
                error = response.json()["error"]
                assert error["code"] == "UNAVAILABLE" and "database" in error["message"]
                assert "127.0.0.1" not in response.text and "nonexistent" not in response.text
    finally:
        await compute.close()
    logged = [r for r in caplog.records if "answered 503" in r.getMessage()]
    assert len(logged) == 2 and all(r.exc_info is None for r in logged)
    assert "cannot use the database" in logged[0].getMessage() or "refused" in logged[0].getMessage()
