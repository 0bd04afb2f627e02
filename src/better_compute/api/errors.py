"""ComputeError and request validation errors as the API's JSON error body.

    {"error": {"code": "NOT_FOUND", "message": "...", "path": "/poolId", "problems": [...]}}

The status comes from `core.errors.http_status`; UNAVAILABLE with a retry time also
sets `Retry-After`. A path no route serves (404) and a method a route does not take
(405) answer the same envelope, and ERROR_RESPONSES puts it in the OpenAPI document
for every route. A database that is down or too busy to hand out a connection, wherever
the request met it (the API-key check included), answers 503 UNAVAILABLE with
`Retry-After` and one log line (`DatabaseUnavailableMiddleware`), not a 500 and a
traceback; what the database said stays in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from better_compute.api.middleware import HttpMiddleware
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.http import error_response
from better_compute.store.errors import TRANSIENT_SQLSTATE_CLASSES, unavailable_reason

__all__ = [
    "ERROR_RESPONSES",
    "UNAVAILABLE_DOC",
    "DatabaseUnavailableMiddleware",
    "ErrorBody",
    "install_error_handlers",
    "pointer",
]

log = logging.getLogger(__name__)

DATABASE_RETRY_AFTER_S = 1.0

UNAVAILABLE_DOC = "\n".join(
    [
        "## 503 UNAVAILABLE and Retry-After",
        "",
        "A 503 is never the caller's fault and never a half-done request it must repair; every 503 carries",
        "`Retry-After` (whole seconds): the error's own retry time, or 1. The API answers 503 when:",
        "",
        "- the database cannot be used just now, wherever the request met it (the API-key check included) and",
        "  before its answer started: it refuses connections, its host does not resolve, it does not answer in",
        "  time, no pooled connection comes free in time, SQLite is locked past its busy timeout, a connection",
        "  is cut in the middle of a statement, or the server ends the statement with a SQLSTATE of class "
        + ", ".join(f"{cls} ({name})" for cls, name in TRANSIENT_SQLSTATE_CLASSES.items())
        + ".",
        f"  The answer says only that the database cannot be reached (`Retry-After: {DATABASE_RETRY_AFTER_S:.0f}`);",
        "  the server logs the reason in one line;",
        f"- `/healthz`: the database did not answer its `SELECT 1` (`Retry-After: {DATABASE_RETRY_AFTER_S:.0f}`);",
        "- a write that waited past its turn for SQLite's one writer (`the database is busy`, `Retry-After: 1`);",
        "- a route's own UNAVAILABLE: no ready node of the pool has the GPUs free (`reason: no-capacity`), too many",
        "  concurrent bookings, a tenant's quota row made by a concurrent booking, the gateway's cap on joins in",
        "  flight, a join to a pool whose cluster is not ready yet, a provider throttling (its own retry time),",
        "  a cluster API that does not answer or mints no token, or a secret deleted while it was being made.",
        "",
        "A create answered 503 (or not answered at all) may still have been made, if the database committed",
        "it before the connection was lost: retry it with the same `Idempotency-Key` (below) to get it back.",
    ]
)
"""The 503 section of docs/api.md."""


class ProblemBody(BaseModel):
    path: str
    message: str


class ErrorDetail(BaseModel):
    code: ErrorCode
    message: str
    path: str | None = None
    problems: list[ProblemBody] | None = None
    retryAfter: float | None = None
    reason: str | None = None


class ErrorBody(BaseModel):
    """Every error the API answers."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "INVALID_INPUT: the request is wrong; `path` points at the field"},
    401: {"model": ErrorBody, "description": "PERMISSION_DENIED: no API key, or not a valid one"},
    403: {"model": ErrorBody, "description": "PERMISSION_DENIED: the caller may not do this"},
    404: {"model": ErrorBody, "description": "NOT_FOUND: no such object for this tenant, or no such route"},
    409: {"model": ErrorBody, "description": "CONFLICT or INVALID_STATE"},
    413: {"model": ErrorBody, "description": "INVALID_INPUT, reason too-large: the body is over its byte limit"},
    503: {"model": ErrorBody, "description": "UNAVAILABLE: a dependency is down or throttling; see Retry-After"},
}

_HTTP_CODES = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.INVALID_INPUT}

_LOCATIONS = ("body", "query", "path", "header", "cookie")


def pointer(location: tuple[int | str, ...] | list[int | str]) -> str:
    """A pydantic error location as a JSON pointer into the request body or parameters."""
    parts = list(location)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts) if parts else "/"


async def _compute_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, ComputeError):
        raise exc
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):
        raise exc
    problems = [Problem(pointer(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in exc.errors()]
    if not problems:
        problems = [Problem("/", "the request is invalid")]
    return error_response(ComputeError.invalid(problems))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own 404/405 (no such route, wrong method) in the same envelope as every other error."""
    if not isinstance(exc, HTTPException):
        raise exc
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}: see /docs for the routes"
    elif exc.status_code == 405:
        message = f"{request.url.path} does not take {request.method}"
    else:
        message = str(exc.detail)
    code = _HTTP_CODES.get(exc.status_code, ErrorCode.INVALID_INPUT)
    body = {"error": ComputeError(code, message).to_dict()}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ComputeError, _compute_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)


class DatabaseUnavailableMiddleware(HttpMiddleware):
    """An HTTP request that meets a database it cannot use, before its answer has started,
    is answered 503 UNAVAILABLE (the operator's reason goes to the log, not to the caller)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def send_and_note(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception as exc:
            reason = unavailable_reason(exc)
            if reason is None or started:
                raise
            log.warning("%s %s answered 503: %s", scope["method"], scope["path"], reason)
            busy = ComputeError(
                ErrorCode.UNAVAILABLE,
                "the control plane cannot reach its database just now; try again shortly",
                retry_after=DATABASE_RETRY_AFTER_S,
            )
            await error_response(busy)(scope, receive, send)
