"""A JSON object key that is a lone UTF-16 surrogate, on every route that takes a JSON body.

The input boundary refuses such a key, and its problem repeats the key in its path; that path is
escaped, so the answer is a 400 naming the field and never a 500 an encoder raised. The routes are
enumerated from the app's own OpenAPI document, so a route added later is covered too."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from better_compute.api import create_app
from better_compute.core.clock import SimClock
from better_compute.fleet import fleet_module
from better_compute.kubernetes import kubernetes
from better_compute.server import better_compute
from better_compute.store import Database
from better_compute.vps import vps

SECRET = "a-surrogate-test-secret-of-32-characters"
BODIES = {
    b'{"\\ud800": 1}': "/\\ud800",
    b'{"document": {"sites": {"\\udfff\\ud800x": []}}}': "/document/sites/\\udfff\\ud800x",
}
"""Raw bodies (the escapes are JSON's, so the bytes are ASCII) and the path each problem names."""


@pytest.fixture
async def served(database: Database, database_url: str) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, str]]:
    compute = better_compute(
        database=database_url, secret=SECRET, modules=[vps(), kubernetes(), fleet_module()], clock=SimClock()
    )
    app = create_app(compute)
    async with app.router.lifespan_context(app):
        tenant = await compute.iam.create_tenant("surrogates")
        _, key = await compute.iam.create_api_key(tenant.id)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield app, client, key


def _body_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every operation that takes a body, path parameters filled in."""
    document = app.openapi()
    found = [
        (method.upper(), path.replace("{", "x-").replace("}", ""))
        for path, operations in document["paths"].items()
        for method in operations
        if method in ("post", "put", "patch")
    ]
    return sorted(found)


async def test_a_lone_surrogate_key_is_a_400_naming_it_on_every_json_route(
    served: tuple[FastAPI, httpx.AsyncClient, str],
) -> None:
    app, client, key = served
    routes = _body_routes(app)
    assert {("POST", "/v1/fleet/plan"), ("POST", "/v1/fleet/apply"), ("POST", "/v1/reservations")} <= set(routes)
    assert ("POST", "/v1/gateway/join") in routes, "the unauthenticated join route too"
    for method, path in routes:
        for raw, where in BODIES.items():
            response = await client.request(
                method,
                path,
                content=raw,
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
            assert response.status_code == 400, (method, path, response.status_code, response.text[:300])
            error = response.json()["error"]
            assert error["code"] == "INVALID_INPUT", (method, path)
            assert [p["path"] for p in error["problems"]] == [where], (method, path)
            assert "lone UTF-16 surrogate" in error["message"], (method, path)
