"""What the operator routes share: the Compute and the calling tenant, as FastAPI dependencies."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from better_compute.core.http import compute_of, current_principal
from better_compute.server import Compute

__all__ = ["CallerTenant", "ComputeDep"]


def _compute(request: Request) -> Compute:
    return cast(Compute, compute_of(request))  # create_app keeps the Compute there


def _tenant(request: Request) -> str:
    return current_principal(request).tenant_id


ComputeDep = Annotated[Compute, Depends(_compute)]
CallerTenant = Annotated[str, Depends(_tenant)]
