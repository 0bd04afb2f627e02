"""API-key authentication as plain ASGI middleware.

Every HTTP and WebSocket request outside the public paths must carry `Authorization:
Bearer <api key>`; the key is checked with `compute.iam.authenticate` and the
Principal is put in the ASGI scope, where `core.http.current_principal` finds it, and its
key id is who acts for the decision log (`decisions.acting_as`).
A missing or bad key is answered 401 with the JSON error body, before any route runs.
Public paths: `/healthz`, `/metrics`, the API's own description (`/openapi.json`,
`/docs`, `/redoc`), and the prefixes modules declare (the gateway, whose nodes
authenticate with their own credentials).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from better_compute.core.errors import ComputeError, ErrorCode, http_status
from better_compute.core.http import PRINCIPAL_SCOPE_KEY
from better_compute.decisions import acting_as
from better_compute.iam import Iam

__all__ = ["ApiKeyMiddleware"]

ALWAYS_PUBLIC = ("/healthz", "/metrics", "/openapi.json", "/docs", "/redoc")


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, *, iam: Iam, public_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.iam = iam
        self.public = tuple(p.rstrip("/") for p in (*ALWAYS_PUBLIC, *public_prefixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            principal = scope[PRINCIPAL_SCOPE_KEY] = await self.iam.authenticate(_bearer(Headers(scope=scope)))
        except ComputeError as err:
            await _refuse(scope, receive, send, err)
            return
        with acting_as(principal.key_id):  # the decisions this request makes name its key
            await self.app(scope, receive, send)

    def _is_public(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.public)


def _bearer(headers: Headers) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ComputeError(ErrorCode.PERMISSION_DENIED, "this endpoint needs an API key (Authorization: Bearer ...)")
    return token.strip()


async def _refuse(scope: Scope, receive: Receive, send: Send, err: ComputeError) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": err.message})
        return
    denied = err.code is ErrorCode.PERMISSION_DENIED
    response = JSONResponse(
        {"error": err.to_dict()},
        status_code=401 if denied else http_status(err.code, err.reason),
        headers={"WWW-Authenticate": "Bearer"} if denied else None,
    )
    await response(scope, receive, send)
