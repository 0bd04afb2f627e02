"""What an HTTP route may ask of its request: who is calling, and the Compute.

The API-key middleware in `better_compute.api` authenticates `Authorization: Bearer
<api key>` and stores the Principal in the ASGI scope under `PRINCIPAL_SCOPE_KEY`;
`create_app` keeps the Compute on `app.state.compute`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse

from better_compute.core.errors import ComputeError, ErrorCode, http_status
from better_compute.core.principal import Principal

if TYPE_CHECKING:
    from better_compute.core.module import ComputeLike

__all__ = [
    "COMPONENTS_KEY",
    "DEFAULT_RETRY_AFTER_S",
    "PRINCIPAL_SCOPE_KEY",
    "compute_of",
    "current_principal",
    "error_response",
    "json_body",
]

PRINCIPAL_SCOPE_KEY = "better_compute.principal"

COMPONENTS_KEY = "x-components"
"""Where `json_body` leaves the schemas a body refers to; the API moves them to `components.schemas`."""


DEFAULT_RETRY_AFTER_S = 1.0
"""The `Retry-After` of a 503 whose error names no retry time of its own."""


def error_response(err: ComputeError) -> JSONResponse:
    """The error's JSON answer; every UNAVAILABLE (503) says when to try again in `Retry-After`:
    the error's own retry time, or DEFAULT_RETRY_AFTER_S."""
    headers = None
    if err.code is ErrorCode.UNAVAILABLE:
        retry_after = DEFAULT_RETRY_AFTER_S if err.retry_after is None else err.retry_after
        headers = {"Retry-After": str(max(0, math.ceil(retry_after)))}
    return JSONResponse({"error": err.to_dict()}, status_code=http_status(err.code, err.reason), headers=headers)


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads its JSON body itself (through the input boundary):
    the OpenAPI document still describes the body, so clients and fuzzers can generate real ones."""
    schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    definitions = schema.pop("$defs", {})
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        COMPONENTS_KEY: definitions,
    }


def current_principal(request: Request) -> Principal:
    """The authenticated caller; PERMISSION_DENIED if the request carried no valid API key."""
    principal: Any = request.scope.get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise ComputeError(ErrorCode.PERMISSION_DENIED, "this endpoint needs an API key (Authorization: Bearer ...)")
    return principal


def compute_of(request: Request) -> ComputeLike:
    """The Compute this app serves."""
    compute: ComputeLike = request.app.state.compute
    return compute
