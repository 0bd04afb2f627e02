"""The gateway's endpoints: `POST /v1/gateway/join` and the WebSocket `/v1/gateway/connect`.

Neither takes an API key: the join token and the node credential are their own
authentication (in the body and the first message, never in a URL or a header that
proxies log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pydantic
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse

from better_compute.bcd.protocol import MAX_MESSAGE_BYTES, JoinRequest, JoinResponse
from better_compute.core.errors import ComputeError, ErrorCode, Problem, http_status

if TYPE_CHECKING:
    from better_compute.gateway.service import Gateway

__all__ = ["CONNECT_PATH", "JOIN_PATH", "gateway_router"]

JOIN_PATH = "/v1/gateway/join"
CONNECT_PATH = "/v1/gateway/connect"


def _error(error: ComputeError) -> JSONResponse:
    return JSONResponse({"error": error.to_dict()}, status_code=http_status(error.code, error.reason))


def _problems(exc: pydantic.ValidationError) -> ComputeError:
    problems = [
        Problem("/" + "/".join(str(p) for p in error["loc"]), error["msg"])
        for error in exc.errors(include_url=False, include_input=False)
    ]
    return ComputeError.invalid(problems)


def gateway_router(gateway: Gateway) -> APIRouter:
    router = APIRouter(tags=["gateway"])

    @router.post(JOIN_PATH)
    async def join(request: Request) -> JSONResponse:
        body = await request.body()
        if len(body) > MAX_MESSAGE_BYTES:
            return _error(ComputeError(ErrorCode.INVALID_INPUT, f"a join request is at most {MAX_MESSAGE_BYTES} bytes"))
        try:
            join_request = JoinRequest.model_validate_json(body)
        except pydantic.ValidationError as exc:
            return _error(_problems(exc))
        try:
            joined = await gateway.join(join_request)
        except ComputeError as exc:
            return _error(exc)
        answer = JoinResponse(node_id=joined.node.id, pool_id=joined.node.pool_id, credential=joined.credential)
        return JSONResponse(answer.model_dump(mode="json", by_alias=True))

    @router.websocket(CONNECT_PATH)
    async def connect(websocket: WebSocket) -> None:
        await gateway.serve(websocket)

    return router
