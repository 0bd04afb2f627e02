"""Writing a plan: the desired state, in the caller's one transaction.

Sites go through compute's session functions, provider accounts through the vps
module's, pools through compute's (`create_pool`, `update_pool`, `archive_pool`).
Each pool whose substrate is created, changed or torn down, and each pool whose
account's config changed, gets a `kubernetes.substrate` work item in the same
transaction: the substrate reconciler picks it up once the caller wakes the engine.
Nothing here talks to a provider; a failure anywhere rolls the whole apply back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.pools import archive_pool, create_pool, update_pool
from better_compute.compute.sites import create_site, delete_site, update_site
from better_compute.engine import enqueue
from better_compute.fleet.plan import Action, Plan, PlanItem, SubstrateAction, pool_record
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.snapshot import PoolState, Snapshot
from better_compute.kubernetes.names import SUBSTRATE_KIND, substrate_holder
from better_compute.vps.accounts import create_account, delete_account, hold_account, update_account

__all__ = ["write_plan"]

RECONCILE = (SubstrateAction.CREATE, SubstrateAction.UPDATE, SubstrateAction.TEARDOWN)


async def _sites(
    session: AsyncSession, items: list[PlanItem], document: FleetDocument, tenant_id: str, now: datetime
) -> dict[str, str]:
    """Create and update sites; returns every site id by name, new ones included."""
    specs = {s.name: s for s in document.sites}
    ids: dict[str, str] = {}
    for item in items:
        spec = specs.get(item.name)
        if item.action is Action.CREATE and spec is not None:
            site = await create_site(
                session, now=now, tenant_id=tenant_id, name=spec.name, kind=spec.kind, region=spec.region
            )
            ids[spec.name] = site.id
        elif item.action is Action.UPDATE and spec is not None and item.id is not None:
            await update_site(
                session, now=now, tenant_id=tenant_id, site_id=item.id, kind=spec.kind, region=spec.region
            )
        if item.id is not None:
            ids[item.name] = item.id
    return ids


async def _accounts(
    session: AsyncSession, items: list[PlanItem], document: FleetDocument, tenant_id: str, now: datetime
) -> set[str]:
    """Create and update accounts; returns the names of the accounts whose config changed."""
    specs = {a.name: a for a in document.provider_accounts}
    changed = set()
    for item in items:
        spec = specs.get(item.name)
        if item.action is Action.CREATE and spec is not None:
            await create_account(
                session, now=now, tenant_id=tenant_id, name=spec.name, provider=spec.provider, config=dict(spec.config)
            )
        elif item.action is Action.UPDATE and spec is not None and item.id is not None:
            await update_account(session, now=now, tenant_id=tenant_id, account_id=item.id, config=dict(spec.config))
            changed.add(item.name)
    return changed


async def _pools(
    session: AsyncSession,
    items: list[PlanItem],
    document: FleetDocument,
    snapshot: Snapshot,
    site_ids: dict[str, str],
    tenant_id: str,
    now: datetime,
) -> set[str]:
    """Create, update and archive pools; returns the pool ids whose substrate must reconcile."""
    specs = {p.name: p for p in document.pools}
    wake: set[str] = set()
    for item in items:
        spec = specs.get(item.name)
        if item.action is Action.CREATE and spec is not None:
            record = pool_record(spec)
            pool = await create_pool(
                session,
                now=now,
                tenant_id=tenant_id,
                name=spec.name,
                site_id=site_ids[spec.site],
                pool_class=spec.pool_class,
                gpu_model=spec.gpu_model,
                policy=record["policy"],
            )
            if item.substrate is SubstrateAction.CREATE:
                wake.add(pool.id)
        elif item.action is Action.UPDATE and spec is not None and item.id is not None:
            record = pool_record(spec)
            policy: dict[str, Any] = record["policy"]
            if item.substrate is SubstrateAction.KEEP:
                policy["substrate"] = snapshot.pools[item.name].policy["substrate"]
            await update_pool(
                session,
                now=now,
                tenant_id=tenant_id,
                pool_id=item.id,
                site_id=site_ids[spec.site],
                pool_class=spec.pool_class,
                gpu_model=spec.gpu_model,
                policy=policy,
            )
            if item.substrate is SubstrateAction.TEARDOWN:
                await _hold_for_teardown(session, snapshot, snapshot.pools[item.name], tenant_id, now)
            if item.substrate in RECONCILE:
                wake.add(item.id)
        elif item.action is Action.DELETE and item.id is not None:
            await archive_pool(session, now=now, tenant_id=tenant_id, pool_id=item.id)
            if item.substrate is SubstrateAction.TEARDOWN:
                wake.add(item.id)
    return wake


async def _hold_for_teardown(
    session: AsyncSession, snapshot: Snapshot, pool: PoolState, tenant_id: str, now: datetime
) -> None:
    """A substrate taken out of a pool that stays no longer names its account in any
    policy, yet its teardown still reaches the cluster through it: hold the account
    until the substrate reconciler releases `substrate:<pool id>`."""
    account = snapshot.accounts.get(str(pool.policy["substrate"].get("account")))
    if account is not None:
        await hold_account(
            session, now=now, tenant_id=tenant_id, account_id=account.id, holder=substrate_holder(pool.id)
        )


async def write_plan(
    session: AsyncSession, plan: Plan, document: FleetDocument, snapshot: Snapshot, now: datetime
) -> list[str]:
    """Make the state what `plan` says; returns the pool ids queued for the substrate reconciler."""
    by_kind: dict[str, list[PlanItem]] = {"site": [], "account": [], "pool": []}
    for item in plan.items:
        by_kind[item.kind].append(item)
    tenant_id = plan.tenant_id
    site_ids = await _sites(session, by_kind["site"], document, tenant_id, now)
    changed_accounts = await _accounts(session, by_kind["account"], document, tenant_id, now)
    wake = await _pools(session, by_kind["pool"], document, snapshot, site_ids, tenant_id, now)
    for pool in snapshot.pools.values():
        substrate = pool.policy.get("substrate")
        if isinstance(substrate, dict) and substrate.get("account") in changed_accounts:
            wake.add(pool.id)
    # Last, what nothing uses any more: the plan deletes a site or account only when no pool holds it.
    for item in by_kind["pool"] + by_kind["account"] + by_kind["site"]:
        if item.action is not Action.DELETE or item.id is None:
            continue
        if item.kind == "account":
            await delete_account(session, tenant_id=tenant_id, account_id=item.id)
        elif item.kind == "site":
            await delete_site(session, tenant_id=tenant_id, site_id=item.id)
    for pool_id in sorted(wake):
        await enqueue(session, kind=SUBSTRATE_KIND, key=pool_id, now=now)
    return sorted(wake)
