"""HTTP: `POST /v1/fleet/plan` and `POST /v1/fleet/apply` for the calling tenant.

    POST /v1/fleet/plan   {"document": {...FleetConfig...}, "prune": false, "prices": {...price table...}}
    POST /v1/fleet/apply  {"document": {...}, "prune": false}  or  {"plan": {...saved plan...}}

Both answer the plan as JSON (`Plan.to_dict()`). The body passes the input boundary
(core/input.py: read up to its byte limit, never whole), then the same validation as
the CLI and the Python API, so an HTTP caller gets the same problems at the same JSON
pointers (under `/document`; a price table's under `/prices`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.http import compute_of, current_principal, json_body
from better_compute.core.input import DOCUMENT, decode_json, read_limited
from better_compute.fleet.plan import Plan
from better_compute.fleet.prices import PriceTable, parse_prices
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.service import Fleet

__all__ = ["router"]

router = APIRouter(prefix="/v1/fleet", tags=["fleet"])


class FleetRequest(BaseModel):
    """The body of both routes, as the OpenAPI document describes it (the routes read it themselves)."""

    model_config = ConfigDict(extra="forbid")

    document: FleetDocument | None = None
    prune: bool = False
    plan: dict[str, Any] | None = Field(default=None, description="a saved plan (apply only), as plan answered it")
    prices: dict[str, Any] | None = Field(
        default=None, description="a price table (plan only; docs/fleet-config.md): the plan then shows its cost"
    )


BODY_KEYS = {"document", "prune", "plan", "prices"}


async def _body(request: Request) -> dict[str, Any]:
    """The body through the input boundary, read chunk by chunk up to its byte limit."""
    raw = await read_limited(request.stream(), DOCUMENT.max_bytes)
    body = decode_json(raw, limits=DOCUMENT, what="the request body")
    if not isinstance(body, dict):
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"the request body must be a JSON object, not {_json_kind(body)}", "/"
        )
    unknown = sorted(set(body) - BODY_KEYS)
    if unknown:
        raise ComputeError.invalid([Problem(f"/{k}", "unknown key") for k in unknown])
    if not isinstance(body.get("prune", False), bool):
        raise ComputeError(ErrorCode.INVALID_INPUT, "prune is true or false", "/prune")
    return body


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "true or false"
    if value is None:
        return "null"
    return {list: "an array", str: "a string", int: "a number", float: "a number"}.get(type(value), "that")


def _under(member: str, error: ComputeError) -> ComputeError:
    """Problems of one member of the body (the document, the price table), re-rooted at it."""
    if error.code is not ErrorCode.INVALID_INPUT or not error.problems:
        return error
    return ComputeError.invalid([Problem(f"/{member}{p.path}", p.message) for p in error.problems])


def _prices(body: dict[str, Any]) -> PriceTable | None:
    if body.get("prices") is None:
        return None
    try:
        return parse_prices(body["prices"])
    except ComputeError as error:
        raise _under("prices", error) from None


def _fleet(request: Request) -> Fleet:
    fleet: Fleet = compute_of(request).fleet
    return fleet


@router.post("/plan", openapi_extra=json_body(FleetRequest))
async def plan(request: Request) -> dict[str, Any]:
    """What an apply of the document would do now."""
    principal = current_principal(request)
    body = await _body(request)
    prices = _prices(body)
    try:
        result = await _fleet(request).plan(
            body.get("document"), tenant_id=principal.tenant_id, prune=bool(body.get("prune", False)), prices=prices
        )
    except ComputeError as error:
        raise _under("document", error) from None
    return result.to_dict()


@router.post("/apply", openapi_extra=json_body(FleetRequest))
async def apply(request: Request) -> dict[str, Any]:
    """Apply the document (or a saved plan) in one transaction; answers the plan applied."""
    principal = current_principal(request)
    body = await _body(request)
    if "prices" in body:
        raise ComputeError(ErrorCode.INVALID_INPUT, "prices are for plan: apply writes no cost", "/prices")
    saved = Plan.from_dict(body["plan"]) if isinstance(body.get("plan"), dict) else None
    if "plan" in body and saved is None:
        raise ComputeError(ErrorCode.INVALID_INPUT, "plan is a saved plan object", "/plan")
    try:
        result = await _fleet(request).apply(
            body.get("document"), tenant_id=principal.tenant_id, prune=bool(body.get("prune", False)), plan=saved
        )
    except ComputeError as error:
        raise _under("document", error) from None
    return result.to_dict()
