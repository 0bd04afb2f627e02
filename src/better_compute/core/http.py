"""What an HTTP route may ask of its request: who is calling, and the Compute.

The API-key middleware in `better_compute.api` authenticates `Authorization: Bearer
<api key>` and stores the Principal in the ASGI scope under `PRINCIPAL_SCOPE_KEY`;
`create_app` keeps the Compute on `app.state.compute`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.principal import Principal

if TYPE_CHECKING:
    from better_compute.core.module import ComputeLike

__all__ = ["PRINCIPAL_SCOPE_KEY", "compute_of", "current_principal"]

PRINCIPAL_SCOPE_KEY = "better_compute.principal"


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
