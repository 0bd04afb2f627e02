"""The API's own routes: health, metrics, who the caller is, and the server's doctor as that caller sees it."""

from __future__ import annotations

import logging
import math

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from sqlalchemy import text
from starlette.responses import JSONResponse, Response

from better_compute.api.deps import ComputeDep
from better_compute.api.errors import DATABASE_RETRY_AFTER_S
from better_compute.core.findings import has_errors
from better_compute.core.http import compute_of, current_principal
from better_compute.ops.health import refresh_gpu_gauges

__all__ = ["router"]

router = APIRouter()
log = logging.getLogger(__name__)


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
async def metrics(compute: ComputeDep) -> Response:
    """Prometheus metrics of this process, and the GPU health gauges as the store has them now."""
    try:
        await refresh_gpu_gauges(compute)
    except Exception as exc:  # the process's own metrics are still worth serving
        log.warning("the GPU health gauges were not refreshed: %s", type(exc).__name__)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/whoami")
async def whoami(request: Request) -> dict[str, str]:
    """The tenant and key the request authenticated as."""
    principal = current_principal(request)
    return {"tenantId": principal.tenant_id, "keyId": principal.key_id}


@router.get("/v1/doctor")
async def doctor(request: Request, compute: ComputeDep) -> dict[str, object]:
    """The server's self-check and doctor findings, as the caller's tenant sees them.

    Other tenants' objects never show; failing work items are counted, not named."""
    principal = current_principal(request)
    findings = await compute.doctor(tenant_id=principal.tenant_id)
    return {"findings": [f.to_dict() for f in findings], "ok": not has_errors(findings)}
