"""The gateway as a Compute module: services attached, endpoints public in the one API app."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx
from starlette.websockets import WebSocket

from better_compute.api.app import create_app
from better_compute.core.clock import SimClock
from better_compute.gateway import Gateway, JoinTokens, gateway
from better_compute.server import better_compute
from better_compute.store import Database
from better_compute.wire.protocol import CONNECT_PATH

from .conftest import node_inventory


async def test_the_join_endpoint_works_in_the_api_app_without_an_api_key(database: Database, clock: SimClock) -> None:
    module = gateway(heartbeat_seconds=5.0)
    compute = better_compute(
        database=database.url, secret="s" * 40, base_url="http://127.0.0.1:8080", modules=[module], clock=clock
    )
    try:
        assert isinstance(compute.gateway, Gateway) and isinstance(compute.join_tokens, JoinTokens)
        assert compute.gateway.hub.heartbeat_seconds == 5.0
        assert module.self_check() == []
        tenant = await compute.iam.create_tenant("acme")
        site = await compute.sites.create(tenant.id, "k8s", "shared", "us-east-1")
        pool = await compute.pools.create(tenant.id, "gpu-fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
        token, value = await compute.join_tokens.create(tenant.id, pool.id, uses=1)

        app = create_app(compute)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp") as client:
            body = {"token": value, "inventory": node_inventory("node-a").model_dump(mode="json", by_alias=True)}
            joined = await client.post("/v1/gateway/join", json=body)
            assert joined.status_code == 200, joined.text
            assert set(joined.json()) == {"nodeId", "poolId", "credential"}
            again = await client.post("/v1/gateway/join", json=body)
            assert again.status_code == 403
            assert again.json()["error"]["code"] == "PERMISSION_DENIED"
            malformed = await client.post("/v1/gateway/join", json={"token": value})
            assert malformed.status_code == 400
            assert malformed.json()["error"]["problems"][0]["path"] == "/inventory"
        assert (await compute.join_tokens.get(tenant.id, token.id)).uses == 1

        await module.start()
        assert await module.doctor() == []
        await module.close()
    finally:
        await compute.close()


async def test_the_node_websocket_is_served_from_the_top_of_the_api_app(database: Database, clock: SimClock) -> None:
    """Each layer a session is called through stays in memory while the node is connected (gateway/routes.py)."""
    compute = better_compute(
        database=database.url, secret="s" * 40, base_url="http://127.0.0.1:8080", modules=[gateway()], clock=clock
    )
    try:
        app = create_app(compute)
        callers: list[str] = []
        serve = compute.gateway.serve

        async def serve_and_look(websocket: WebSocket) -> None:
            frame = sys._getframe(1)
            while frame is not None:  # a running coroutine's caller is the coroutine that awaits it
                callers.append(frame.f_code.co_qualname)
                frame = frame.f_back
            await serve(websocket)

        compute.gateway.serve = serve_and_look  # type: ignore[method-assign]
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in ({"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}):
            inbox.put_nowait(message)
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "websocket",
            "path": CONNECT_PATH,
            "query_string": b"",
            "headers": [],
            "client": ("10.0.0.1", 4000),
        }
        await app(scope, inbox.get, send)
        assert sent[0]["type"] == "websocket.accept", "the session ran: accepted, then the node went away"
        # The session is awaited by the app's own call: no layer of the app in between.
        assert callers[0] == "NodeSocketFirst.__call__", callers
        below = {"ApiKeyMiddleware.__call__", "ExceptionMiddleware.__call__", "Router.__call__", "APIRouter.app"}
        assert below.isdisjoint(callers), callers
        layers = {"FastAPI.__call__", "Starlette.__call__", "ServerErrorMiddleware.__call__", "Gateway.serve"}
        assert layers.isdisjoint(callers), callers  # 17 coroutines through the router, 6 through the app's top
    finally:
        await compute.close()
