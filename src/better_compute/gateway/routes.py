"""The gateway's endpoints: `POST /v1/gateway/join` and the WebSocket `/v1/gateway/connect`.

Neither takes an API key: the join token and the node credential are their own
authentication (in the body and the first message, never in a URL or a header that
proxies log).

In `better-compute serve` the WebSocket is served by the app itself (`NodeSocketFirst`, the
FastAPI that create_app makes) before any of its layers, rather than through the router: a
connected node's session is a coroutine that waits as long as the node stays, and each
layer it is called through (FastAPI's and Starlette's own calls, the error middleware, the
HTTP middlewares, FastAPI's exception handling and exit stacks, the router) stays in memory
with it, about 10 KiB a node over some twenty coroutines. Those layers do nothing for this
socket: they serve HTTP, the path is public, and the session handler answers every failure
itself (serve_connection never raises).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pydantic
from fastapi import APIRouter, FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from better_compute.core.errors import ComputeError, Problem
from better_compute.core.http import error_response, json_body
from better_compute.core.input import FRAME, decode_json, read_limited
from better_compute.wire.protocol import CONNECT_PATH, JOIN_PATH, JoinRequest, JoinResponse

if TYPE_CHECKING:
    from better_compute.gateway.service import Gateway

__all__ = ["NodeSocketFirst", "gateway_router"]


def _problems(exc: pydantic.ValidationError) -> ComputeError:
    problems = [
        Problem("/" + "/".join(str(p) for p in error["loc"]), error["msg"])
        for error in exc.errors(include_url=False, include_input=False)
    ]
    return ComputeError.invalid(problems)


def gateway_router(gateway: Gateway) -> APIRouter:
    router = APIRouter(tags=["gateway"])

    @router.post(JOIN_PATH, openapi_extra=json_body(JoinRequest))
    async def join(request: Request) -> JSONResponse:
        try:
            # Read up to the limit and no further (a 128 MiB body is refused after its first 64 KiB).
            body = await read_limited(request.stream(), FRAME.max_bytes, what="a join request")
            join_request = JoinRequest.model_validate(decode_json(body, limits=FRAME, what="a join request"))
        except ComputeError as exc:
            return error_response(exc)
        except pydantic.ValidationError as exc:
            return error_response(_problems(exc))
        try:
            joined = await gateway.join(join_request)
        except ComputeError as exc:
            return error_response(exc)
        answer = JoinResponse(node_id=joined.node.id, pool_id=joined.node.pool_id, credential=joined.credential)
        return JSONResponse(answer.model_dump(mode="json", by_alias=True))

    @router.websocket(CONNECT_PATH)
    async def connect(websocket: WebSocket) -> None:
        await gateway.serve(websocket)

    return router


class NodeSocketFirst(FastAPI):
    """FastAPI whose node WebSocket is served before any layer of the app (see above), once
    `gateway` is set: the session is awaited by this call alone, FastAPI's own not entered.

    (`__call__` stays a coroutine function: servers tell an ASGI 3 app by it.)"""

    gateway: Gateway | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        if (
            gateway is not None
            and scope["type"] == "websocket"
            and scope["path"].removeprefix(scope.get("root_path", "")) == CONNECT_PATH
        ):
            await gateway.serve(WebSocket(scope, receive, send))
            return
        await super().__call__(scope, receive, send)
