"""The orphan sweep as the CLI and the HTTP API answer it (`better-compute sweep`, `/v1/sweep`).

`compute.kubernetes_sweep` finds and removes; this is the one place its reports become views.
"""

from __future__ import annotations

from collections.abc import Sequence

from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = ["delete_orphans", "sweep"]


async def sweep(compute: Compute, tenant_id: str, account: str | None = None) -> View:
    """What carries better-compute's marks in the tenant's provider accounts and no record owns."""
    report = await compute.kubernetes_sweep.sweep(tenant_id=tenant_id, account=account)
    view: View = report.to_json()
    return view


async def delete_orphans(compute: Compute, tenant_id: str, ids: Sequence[str], account: str | None = None) -> View:
    """Remove the named orphans a sweep finds now, one by one: each one's outcome, and the sweep after."""
    deletions, after = await compute.kubernetes_sweep.delete(tenant_id=tenant_id, ids=ids, account=account)
    return {"deletions": [d.to_json() for d in deletions], "after": after.to_json()}
