"""Substrates and clusters: their views are the operator's (ops.clusters), mounted with the kubernetes module."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from ops_world import SECRET, seed

from better_compute.api import create_app
from better_compute.kubernetes import kubernetes
from better_compute.ops import clusters
from better_compute.server import better_compute
from better_compute.store import Database

ROUTES = {
    ("GET", "/v1/pools/{pool}/kubernetes-substrate"),
    ("GET", "/v1/kubernetes/clusters"),
    ("GET", "/v1/kubernetes/clusters/{cluster_id}"),
    ("POST", "/v1/kubernetes/clusters/{cluster_id}/credentials"),
    ("POST", "/v1/kubernetes/clusters/{cluster_id}/upgrade"),
}


def _routes(app: FastAPI) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item}


async def test_the_routes_come_with_the_kubernetes_module_and_answer_the_cli_s_views(
    database: Database, database_url: str
) -> None:
    assert not ROUTES & _routes(create_app(better_compute(database=database_url, secret=SECRET)))
    compute = better_compute(database=database_url, secret=SECRET, modules=[kubernetes()])
    app = create_app(compute)
    assert _routes(app) >= ROUTES
    async with app.router.lifespan_context(app):
        world = await seed(compute)
        _, key = await compute.iam.create_api_key(world.tenant_id)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            listed = await client.get("/v1/kubernetes/clusters")
            assert listed.status_code == 200
            assert (
                listed.json()
                == {"clusters": await clusters.list_clusters(compute, world.tenant_id)}
                == {"clusters": []}
            )
            missing = await client.get("/v1/kubernetes/clusters/kcl_missing")
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
            no_substrate = await client.get("/v1/pools/gpu-fleet/kubernetes-substrate")
            assert no_substrate.status_code == 404, no_substrate.text
