"""The operator's routes under /v1 on SQLite and PostgreSQL, and the API's conventions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from ops_world import SECRET, Seeded, seed

from better_compute.api import create_app
from better_compute.fleet import fleet_module
from better_compute.ops import pools
from better_compute.server import Compute, better_compute
from better_compute.store import Database
from better_compute.vps import vps


@dataclass
class Api:
    compute: Compute
    client: httpx.AsyncClient
    world: Seeded
    routes: list[APIRoute]
    seen: list[str]

    async def call(self, method: str, path: str, *, status: int = 200, **kwargs: Any) -> Any:
        response = await self.client.request(method, path, **kwargs)
        self.seen.append(response.text)
        assert response.status_code == status, response.text
        return response.json()


@pytest.fixture
async def api(database: Database, database_url: str) -> AsyncIterator[Api]:
    compute = better_compute(database=database_url, secret=SECRET, modules=[vps(), fleet_module()])
    app = create_app(compute)
    async with app.router.lifespan_context(app):
        world = await seed(compute)
        _, key = await compute.iam.create_api_key(world.tenant_id)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            routes = [r for r in app.routes if isinstance(r, APIRoute)]
            yield Api(compute, client, world, routes, [])


async def test_reads_answer_the_same_objects_as_the_cli(api: Api) -> None:
    assert await api.call("GET", "/v1/tenants") == [{"id": api.world.tenant_id, "name": "acme"}]
    assert await api.call("GET", "/v1/pools") == await pools.list_pools(api.compute, api.world.tenant_id)
    pool = await api.call("GET", "/v1/pools/gpu-fleet")
    assert (pool["nodes"], pool["connectedNodes"]) == (2, 1)
    nodes = await api.call("GET", "/v1/nodes", params={"pool": "gpu-fleet"})
    assert {(n["name"], n["connected"], n["labels"]["zone"]) for n in nodes} == {
        ("node-a", True, "tor1-a"),
        ("node-b", False, "tor1-a"),
    }
    missing = await api.call("GET", "/v1/pools/nope", status=404)
    assert missing["error"] == {"code": "NOT_FOUND", "message": "no pool named 'nope'", "path": "/name"}


async def test_a_pool_is_archived_by_its_tenant_only(api: Api) -> None:
    other = await api.compute.iam.create_tenant("globex")
    _, other_key = await api.compute.iam.create_api_key(other.id)
    theirs = await api.call(
        "POST", "/v1/pools/gpu-fleet/archive", headers={"Authorization": f"Bearer {other_key}"}, status=404
    )
    assert theirs["error"] == {"code": "NOT_FOUND", "message": "no pool named 'gpu-fleet'", "path": "/name"}
    assert (await api.call("GET", "/v1/pools/gpu-fleet"))["state"] == "active"
    archived = await api.call("POST", "/v1/pools/gpu-fleet/archive")
    assert (archived["id"], archived["state"]) == (api.world.pool_id, "archiving")  # its nodes drain first
    assert {n["state"] for n in await api.call("GET", "/v1/nodes", params={"pool": "gpu-fleet"})} == {"cordoned"}
    again = await api.call("POST", "/v1/pools/gpu-fleet/archive")
    assert (again["id"], again["state"]) == (api.world.pool_id, "archiving")


async def test_the_doctor_route_answers_the_servers_findings(api: Api) -> None:
    answer = await api.call("GET", "/v1/doctor")
    assert answer == {"findings": [f.to_dict() for f in api.compute.self_check()], "ok": True}


async def test_reservations_are_booked_listed_and_released(api: Api) -> None:
    made = await api.call("POST", "/v1/reservations", json={"pool": "gpu-fleet", "gpus": 2}, status=201)
    assert (made["gpuCount"], made["state"]) == (2, "active")
    assert [r["id"] for r in await api.call("GET", "/v1/reservations", params={"state": "active"})] == [made["id"]]
    released = await api.call("POST", f"/v1/reservations/{made['id']}/release")
    assert released["state"] == "released"
    bad = await api.call("POST", "/v1/reservations", json={"pool": "gpu-fleet", "gpus": "two"}, status=400)
    assert bad["error"]["path"] == "/gpus"


async def test_api_keys_secrets_and_join_tokens_never_answer_a_value(api: Api) -> None:
    created = await api.call("POST", "/v1/api-keys", status=201)
    key = created["key"]
    keys = await api.call("GET", "/v1/api-keys")
    assert created["id"] in {k["id"] for k in keys}
    await api.call("POST", f"/v1/api-keys/{created['id']}/revoke")
    refused = await api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401

    value = "do-canary-token-value-that-must-never-come-back"
    secret = await api.call("POST", "/v1/secrets", json={"value": value}, status=201)
    assert secret["reference"].startswith(f"secret://{api.world.tenant_id}/")
    assert [s["reference"] for s in await api.call("GET", "/v1/secrets")] == [secret["reference"]]
    await api.call("POST", "/v1/secrets", json={"value": 42, "other": value}, status=400)
    await api.call("DELETE", f"/v1/secrets/{secret['id']}")
    assert await api.call("GET", "/v1/secrets") == []

    (token,) = await api.call("GET", "/v1/join-tokens")
    assert token["id"] == api.world.token_id and token["usesLeft"] == 3
    assert (await api.call("POST", f"/v1/join-tokens/{token['id']}/revoke"))["usesLeft"] == 0

    answered = "\n".join(api.seen)
    assert value not in answered and api.world.token_value not in answered
    assert key not in answered.replace(created["key"], "", 1)  # once, in the create answer


async def test_docs_and_openapi_need_no_key_but_routes_do(api: Api) -> None:
    bare = httpx.AsyncClient(transport=api.client._transport, base_url="http://api")
    async with bare:
        assert (await bare.get("/docs")).status_code == 200
        assert (await bare.get("/openapi.json")).status_code == 200
        for path in ("/v1/pools", "/v1/secrets", "/v1/tenants"):
            refused = await bare.get(path)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "PERMISSION_DENIED"


async def test_unknown_routes_and_methods_answer_the_error_envelope(api: Api) -> None:
    unknown = await api.call("GET", "/v1/no-such-thing", status=404)
    assert unknown == {
        "error": {"code": "NOT_FOUND", "message": "no route GET /v1/no-such-thing: see /docs for the routes"}
    }
    wrong = await api.call("DELETE", "/v1/pools", status=405)
    assert wrong["error"]["message"] == "/v1/pools does not take DELETE"


@pytest.mark.parametrize(
    ("body", "said"), [("[]", "not an array"), ('"x"', "not a string"), ("3", "not a number"), ("null", "not null")]
)
async def test_a_body_that_is_not_an_object_is_named_for_what_it_is(api: Api, body: str, said: str) -> None:
    answer = await api.call("POST", "/v1/fleet/plan", content=body, status=400)
    assert answer["error"]["message"] == f"the request body must be a JSON object, {said}"


async def test_every_route_is_in_the_openapi_document_with_its_errors(api: Api) -> None:
    schema = await api.call("GET", "/openapi.json")
    for route in api.routes:
        for method in route.methods - {"HEAD"}:
            operation = schema["paths"][route.path_format][method.lower()]
            responses = operation["responses"]
            assert {"400", "401", "404", "409", "503"} <= set(responses), route.path
            assert "422" not in responses
            assert responses["404"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
    assert "/v1/reservations" in schema["paths"] and "/healthz" in schema["paths"]
    assert {"/v1/doctor", "/v1/pools/{name}/archive"} <= set(schema["paths"])
