"""PostgreSQL connections cut in the middle of a request: the answer is 503 with Retry-After, never a 500.

A TCP proxy on 127.0.0.1 (cut_proxy.py) stands between the server and PostgreSQL. For each route, the
proxy lets n client messages through and then resets every connection with the next one in flight,
for n = 0, 1, 2, ... until a request completes before its cut: so the cut lands at every statement the
request sends (the connection's opening, the API-key check, BEGIN, each query, the booking's write call,
COMMIT), one after the other."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from cut_proxy import CutProxy
from ops_world import SECRET, seed
from sqlalchemy.engine import make_url

from better_compute.api import create_app
from better_compute.fleet import fleet_module
from better_compute.server import Compute, better_compute
from better_compute.store import Database
from better_compute.vps import vps

REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/healthz", None),
    ("GET", "/v1/whoami", None),
    ("GET", "/v1/pools", None),
    ("GET", "/v1/nodes", None),
    ("GET", "/v1/reservations", None),
    ("POST", "/v1/reservations", {"pool": "gpu-fleet", "gpus": 1}),
]


@dataclass
class Proxied:
    compute: Compute
    client: httpx.AsyncClient
    proxy: CutProxy


@pytest.fixture
async def proxied(database: Database, database_url: str) -> AsyncIterator[Proxied]:
    direct = better_compute(database=database_url, secret=SECRET)
    world = await seed(direct)
    _, key = await direct.iam.create_api_key(world.tenant_id)
    await direct.close()
    url = make_url(database_url)
    async with CutProxy(url.port or 5432, url.host or "127.0.0.1") as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        compute = better_compute(database=through, secret=SECRET, modules=[vps(), fleet_module()])
        # No lifespan: the engine workers' own statements would take the cuts meant for the requests.
        transport = httpx.ASGITransport(app=create_app(compute), raise_app_exceptions=False)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            yield Proxied(compute, client, proxy)
        await compute.close()


async def _answered(client: httpx.AsyncClient) -> None:
    """A request that goes through, so that the next one starts on a pool that has seen the cut."""
    for _ in range(3):
        if (await client.get("/v1/whoami")).status_code == 200:
            return
    raise AssertionError("the API did not recover from a cut connection")


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_a_connection_cut_at_any_statement_answers_503_with_retry_after_never_500(
    proxied: Proxied,
) -> None:
    for method, path, body in REQUESTS:
        unavailable = 0
        for n in itertools.count():
            assert n < 50, f"{method} {path} never got past its cuts"
            await _answered(proxied.client)
            cuts = proxied.proxy.cuts
            proxied.proxy.cut_after(n)
            response = await proxied.client.request(method, path, json=body)
            proxied.proxy.disarm()
            if response.status_code in (200, 201):  # done before its cut, or cut after its answer was settled
                break
            assert proxied.proxy.cuts == cuts + 1, (method, path, n, response.text[:300])
            assert response.status_code == 503, (method, path, n, response.status_code, response.text[:300])
            assert response.headers["retry-after"] == "1", (method, path, n)
            unavailable += 1
        assert unavailable >= 1, (method, path)
