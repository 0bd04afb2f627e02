"""ComputeError and request validation errors as the API's JSON error body.

    {"error": {"code": "NOT_FOUND", "message": "...", "path": "/poolId", "problems": [...]}}

The status comes from `core.errors.http_status`; UNAVAILABLE with a retry time also
sets `Retry-After`.
"""

from __future__ import annotations

import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse

from better_compute.core.errors import ComputeError, ErrorCode, Problem, http_status

__all__ = ["install_error_handlers", "pointer"]

_LOCATIONS = ("body", "query", "path", "header", "cookie")


def pointer(location: tuple[int | str, ...] | list[int | str]) -> str:
    """A pydantic error location as a JSON pointer into the request body or parameters."""
    parts = list(location)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts) if parts else "/"


def error_response(err: ComputeError) -> JSONResponse:
    headers = None
    if err.code is ErrorCode.UNAVAILABLE and err.retry_after is not None:
        headers = {"Retry-After": str(max(0, math.ceil(err.retry_after)))}
    return JSONResponse({"error": err.to_dict()}, status_code=http_status(err.code), headers=headers)


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


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ComputeError, _compute_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
