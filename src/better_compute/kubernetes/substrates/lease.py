"""Every domain write of a substrate run is made under the run's lease.

Each write transaction of a run first locks the substrate's row (the item's own row, which
every run of the item locks before it writes), then checks in that transaction that the run
still holds its lease (`RunContext.guard`). A run whose lease is gone writes nothing: the
check raises `LeaseLost` and the transaction rolls back. A worker that took the item over
after the check waits for the row until this transaction ends.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.engine import RunContext
from better_compute.kubernetes.tables import SubstrateRow

__all__ = ["hold"]


async def hold(session: AsyncSession, run: RunContext, pool_id: str) -> SubstrateRow | None:
    """Lock the substrate's row (None when there is none), then raise unless `run` still holds its lease."""
    row = await session.get(SubstrateRow, pool_id, with_for_update=True, populate_existing=True)
    await run.guard(session)
    return row
