"""The API's own routes: health, metrics, and who the caller is."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from sqlalchemy import text
from starlette.responses import JSONResponse, Response

from better_compute.api.errors import DATABASE_RETRY_AFTER_S
from better_compute.core.http import compute_of, current_principal

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the database answers; 503 with Retry-After otherwise."""
    try:
        async with compute_of(request).db.session() as session:
            await session.execute(text("SELECT 1"))
    except Exception:
        retry = str(math.ceil(DATABASE_RETRY_AFTER_S))
        return JSONResponse({"status": "unavailable"}, status_code=503, headers={"Retry-After": retry})
    return JSONResponse({"status": "ok"})


@router.get("/metrics")
async def metrics() -> Response:
    """Prometheus metrics of this process."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/whoami")
async def whoami(request: Request) -> dict[str, str]:
    """The tenant and key the request authenticated as."""
    principal = current_principal(request)
    return {"tenantId": principal.tenant_id, "keyId": principal.key_id}
