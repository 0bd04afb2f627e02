"""Who is calling: the tenant and the API key an HTTP request authenticated with.

It lives in core so that `core.http` (below iam in the layers) can carry it, while
`better_compute.iam.Iam.authenticate` is what makes one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. Carries ids only, never the key itself."""

    tenant_id: str
    key_id: str
