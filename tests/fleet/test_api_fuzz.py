"""schemathesis over the whole HTTP API, from its own OpenAPI document: every operation gets generated requests
(bodies from the described schemas, parameters, with and without a valid API key).

No request may answer 5xx or break the app, and the tenant can still plan afterwards. Generated bodies reach the
real routes: FleetConfig documents through plan and apply, join requests through the gateway."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fleet_documents import example
from fleet_stub import stub_providers
from hypothesis import HealthCheck, event, settings
from schemathesis.config import SchemathesisConfig

from better_compute.api.app import create_app
from better_compute.core.clock import SimClock
from better_compute.fleet import fleet_module
from better_compute.kubernetes import kubernetes
from better_compute.server import Compute, better_compute
from better_compute.vps import vps

SECRET = "an-api-fuzz-secret-of-at-least-32-characters"


def _compute(url: str) -> Compute:
    providers = list(stub_providers().values())
    return better_compute(
        database=url,
        secret=SECRET,
        modules=[vps(providers=providers), kubernetes(providers=providers), fleet_module()],
        clock=SimClock(),
    )


SCHEMA = schemathesis.openapi.from_dict(
    create_app(_compute("sqlite://")).openapi(),
    # Generated cases only: the coverage phase adds a fixed batch per operation that a bounded run cannot afford.
    config=SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}}),
)
DOCUMENTS = r"^/v1/(fleet|gateway)/"
"""Operations whose bodies are whole documents: slow to generate, so fewer of them per run."""
SCALE = int(os.environ.get("BC_FUZZ_SCALE", "1"))
"""`BC_FUZZ_SCALE=20 pytest tests/fleet/test_api_fuzz.py` runs twenty times as many requests (docs/testing.md)."""


@pytest.fixture
async def api(sqlite_template: Path, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str, str]]:
    """On SQLite only, to keep the run short: the regression tests hold SQLite and PostgreSQL to the same answers."""
    shutil.copy(sqlite_template, tmp_path / "api.db")
    compute = _compute(f"sqlite:///{tmp_path / 'api.db'}")
    tenant = await compute.iam.create_tenant("fuzzed")
    _, key = await compute.iam.create_api_key(tenant.id)
    transport = httpx.ASGITransport(app=create_app(compute), raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client, key, tenant.id
        # Whatever was sent, the tenant can still plan.
        planned = await client.post(
            "/v1/fleet/plan",
            json={"document": example("gke", tenant_id=tenant.id)},
            headers={"Authorization": f"Bearer {key}"},
        )
    await compute.close()
    assert planned.status_code == 200, planned.text[:500]


def _request(case: Any, key: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = case.as_transport_kwargs(base_url="http://api")
    kwargs.pop("cookies", None)
    if isinstance(kwargs.get("data"), bytes | str):
        kwargs["content"] = kwargs.pop("data")
    headers = dict(kwargs.get("headers") or {})
    if not case.id.endswith(("0", "1")):  # about one request in five keeps the key schemathesis made up
        headers["Authorization"] = f"Bearer {key}"
    kwargs["headers"] = headers
    return kwargs


async def _check(case: Any, api: tuple[httpx.AsyncClient, str, str]) -> None:
    client, key, _ = api
    response = await client.request(**_request(case, key))
    event(f"{response.status_code}")
    assert response.status_code < 500, (case.operation.label, response.status_code, response.text[:500])
    if response.status_code >= 400 and response.headers.get("content-type", "").startswith("application/json"):
        assert set(response.json()) == {"error"}, response.text[:500]


@SCHEMA.exclude(path_regex=DOCUMENTS).parametrize()
@settings(max_examples=6 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
async def test_no_generated_request_gets_a_server_error(case: Any, api: tuple[httpx.AsyncClient, str, str]) -> None:
    await _check(case, api)


@SCHEMA.include(path_regex=DOCUMENTS).parametrize()
@settings(max_examples=4 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
async def test_no_generated_document_gets_a_server_error(case: Any, api: tuple[httpx.AsyncClient, str, str]) -> None:
    await _check(case, api)
