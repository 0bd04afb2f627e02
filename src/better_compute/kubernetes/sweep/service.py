"""`compute.kubernetes_sweep`: the orphan sweep of a tenant's provider accounts, and removing what it found.

    report = await compute.kubernetes_sweep.sweep(tenant_id=..., account=None)
    report.orphans, report.unreachable
    deletions, after = await compute.kubernetes_sweep.delete(tenant_id=..., ids=[...], account=None)

A sweep reads every account of the tenant whose provider has a Kubernetes driver (or the one named)
and records what it found per account (`kubernetes_sweeps`), which doctor reports. A delete sweeps
again first and removes, one by one in `KINDS` order, only the named ids that sweep finds: an id it
no longer finds (removed already, owned again, never ours) is answered `absent` and nothing is done,
so a delete repeated is harmless. A cluster goes after its node pools, as in teardown: the delete that
starts them answers it `pending`, and one after they are gone deletes it. One removal that fails does not stop the others. The sweep after
the deletions is recorded in its turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.sweep.finder import AccountSweep, find_orphans
from better_compute.kubernetes.sweep.orphans import KINDS, Orphan, Unreachable
from better_compute.kubernetes.sweep.removal import remove_orphan
from better_compute.kubernetes.tables import SweepRow

__all__ = ["Deletion", "KubernetesSweep", "SweepReport"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepReport:
    swept_at: datetime
    accounts: tuple[str, ...]
    orphans: tuple[Orphan, ...]
    unreachable: tuple[Unreachable, ...]
    deployment: str = ""
    """This deployment's id: what the sweep took for ours."""
    others: int = 0
    """Clusters and node pools that carry another deployment's mark: left alone, never listed."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sweptAt": self.swept_at.isoformat(),
            "accounts": list(self.accounts),
            "deployment": self.deployment,
            "orphans": [o.to_json() for o in self.orphans],
            "unreachable": [u.to_json() for u in self.unreachable],
            "otherDeployments": self.others,
            "otherDeploymentsMessage": (
                f"{self.others} things of other deployments left alone" if self.others else None
            ),
        }


@dataclass(frozen=True, slots=True)
class Deletion:
    id: str
    outcome: str
    """`deleted` (the removal was made or begun), `pending` (begun with what must go first: a delete again
    finishes it), `absent` (the sweep does not find it) or `failed` (with why)."""
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "outcome": self.outcome, "message": self.message}


class KubernetesSweep:
    def __init__(self, k: KubernetesContext) -> None:
        self.k = k

    async def _accounts(self, tenant_id: str, account: str | None) -> list[str]:
        if account is not None:
            await self.k.account(tenant_id, account)  # NOT_FOUND (/account) for a name the tenant has not
            return [account]
        return [a.name for a in await self.k.accounts.list(tenant_id) if a.provider in self.k.drivers]

    async def _record(self, tenant_id: str, swept: list[AccountSweep], now: datetime) -> None:
        async with self.k.db.transaction() as session:
            for found in swept:
                await session.execute(
                    delete(SweepRow).where(SweepRow.tenant_id == tenant_id, SweepRow.account == found.account)
                )
                session.add(
                    SweepRow(
                        tenant_id=tenant_id,
                        account=found.account,
                        swept_at=now,
                        orphans=[o.to_json() for o in found.orphans],
                        unreachable=[u.to_json() for u in found.unreachable],
                    )
                )

    async def sweep(self, *, tenant_id: str, account: str | None = None) -> SweepReport:
        """What carries better-compute's marks in the tenant's accounts (or `account`) and no record owns."""
        names = await self._accounts(tenant_id, account)
        swept = [await find_orphans(self.k, tenant_id, name) for name in names]
        now = self.k.clock.now()
        await self._record(tenant_id, swept, now)
        return SweepReport(
            swept_at=now,
            accounts=tuple(names),
            orphans=tuple(o for s in swept for o in s.orphans),
            unreachable=tuple(u for s in swept for u in s.unreachable),
            deployment=await self.k.deployment(),
            others=sum(s.others for s in swept),
        )

    async def delete(
        self, *, tenant_id: str, ids: Sequence[str], account: str | None = None
    ) -> tuple[list[Deletion], SweepReport]:
        """Remove the named orphans that a sweep finds now, one by one; then sweep again."""
        found = {o.id: o for o in (await self.sweep(tenant_id=tenant_id, account=account)).orphans}
        wanted = list(dict.fromkeys(ids))
        present = sorted((found[i] for i in wanted if i in found), key=lambda o: KINDS.index(o.kind))
        outcomes = {i: Deletion(i, "absent", "the sweep does not find it now") for i in wanted if i not in found}
        for orphan in present:
            target, driver = await self.k.account(tenant_id, orphan.account)
            try:
                waiting = await remove_orphan(driver, target, orphan, await self.k.deployment())
            except ComputeError as exc:
                log.warning("sweep: removing %s failed: %s", orphan.id, exc)
                outcomes[orphan.id] = Deletion(orphan.id, "failed", str(exc))
                continue
            if waiting is not None:
                log.info("sweep: removing %s: %s", orphan.id, waiting)
                outcomes[orphan.id] = Deletion(orphan.id, "pending", waiting)
                continue
            log.info("sweep: removed %s (%s)", orphan.id, ", ".join(orphan.holds) or orphan.name)
            outcomes[orphan.id] = Deletion(orphan.id, "deleted")
        after = await self.sweep(tenant_id=tenant_id, account=account)
        return [outcomes[i] for i in [o.id for o in present] + [i for i in wanted if i not in found]], after

    async def last(self, tenant_id: str | None = None) -> list[SweepRow]:
        """Each account's last sweep (the tenant's, or everyone's)."""
        query = select(SweepRow).order_by(SweepRow.tenant_id, SweepRow.account)
        if tenant_id is not None:
            query = query.where(SweepRow.tenant_id == tenant_id)
        async with self.k.db.session() as session:
            return list(await session.scalars(query))
