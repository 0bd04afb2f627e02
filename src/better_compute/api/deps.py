"""What the operator routes share: the Compute, the calling tenant and the Idempotency-Key header, as
FastAPI dependencies."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Header, Request

from better_compute.core.http import compute_of, current_principal
from better_compute.ops.idempotency import HEADER, MAX_KEY_LENGTH, RETENTION
from better_compute.server import Compute

__all__ = ["CallerTenant", "ComputeDep", "IdempotencyKey"]


# async, though they never await: FastAPI runs a plain `def` dependency in its thread pool, two
# thread hops per request for nothing.
async def _compute(request: Request) -> Compute:
    return cast(Compute, compute_of(request))  # create_app keeps the Compute there


async def _tenant(request: Request) -> str:
    return current_principal(request).tenant_id


ComputeDep = Annotated[Compute, Depends(_compute)]
CallerTenant = Annotated[str, Depends(_tenant)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=HEADER,
        description=f"A key of your own (1 to {MAX_KEY_LENGTH} visible ASCII characters, a UUID is a good one) that"
        f" makes a retry safe: the same key with the same body answers the first request's object for"
        f" {RETENTION.total_seconds() / 3600:.0f} h; with another body, 409 CONFLICT.",
    ),
]
