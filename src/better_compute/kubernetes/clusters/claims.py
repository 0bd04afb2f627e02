"""Claims on a cluster's provider-global id (GKE selfLink, EKS ARN, DOKS UUID).

The global id is the same string whichever provider account reads the cluster, so a
second pool that reaches a cluster through another account meets the first pool's
claim here, before any node pool is made. The claim is a row keyed by the global id:
the store refuses a second one on SQLite and PostgreSQL alike. A pool's claims go when
its substrate's teardown ends. The holder is named to the refused pool only when both are
the same tenant's: another tenant's pool id is that tenant's data.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine import RunContext
from better_compute.kubernetes.tables import ClusterClaimRow, ClusterRow
from better_compute.store import Database

__all__ = ["claim_global_id", "release_global_claims"]


OTHER_TENANT = "a pool of another tenant"


async def claim_global_id(
    db: Database, run: RunContext, global_id: str, *, tenant_id: str, pool_id: str, cluster_id: str, now: datetime
) -> str | None:
    """Claim `global_id` for `pool_id`, under the run's lease; None when it is (now) this pool's,
    else its holder as `tenant_id` may read it: `pool <id>` of its own, or OTHER_TENANT."""
    for _ in range(2):
        try:
            async with db.transaction() as session:
                held = await session.get(ClusterClaimRow, global_id)
                if held is not None:
                    if held.pool_id == pool_id:
                        return None
                    holder = await session.get(ClusterRow, held.cluster_id)
                    return (
                        f"pool {held.pool_id}" if holder is not None and holder.tenant_id == tenant_id else OTHER_TENANT
                    )
                await run.guard(session)
                session.add(
                    ClusterClaimRow(global_id=global_id, pool_id=pool_id, cluster_id=cluster_id, claimed_at=now)
                )
            return None
        except IntegrityError:
            continue  # claimed by another worker between our read and insert: read it again
    raise ComputeError(ErrorCode.UNAVAILABLE, f"the claim on cluster {global_id} changed while claiming it")


async def release_global_claims(session: AsyncSession, pool_id: str) -> None:
    """Drop every claim of `pool_id`, in the caller's transaction."""
    await session.execute(delete(ClusterClaimRow).where(ClusterClaimRow.pool_id == pool_id))
