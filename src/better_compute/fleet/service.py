"""`compute.fleet`: plan and apply FleetConfig documents, archive a pool by name.

    plan(document, tenant_id=, prune=False, prices=None) -> Plan   reads only
    apply(document, tenant_id=, prune=False, plan=None) -> Plan   one transaction

Validation runs first and outside any transaction (a provider hook may call its
API). Apply then takes the tenant's fleet lock, reads the state, plans against it,
writes, and reads the state back to store its fingerprint before commit: whatever an
apply stores, the next plan can read, or nothing is stored. With `plan=` (a saved
plan) it refuses with CONFLICT when the state's fingerprint moved since the plan was
made, and refuses blocked plans with INVALID_STATE. In every refusal nothing is
written. After commit the engine is woken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.models import Pool
from better_compute.compute.pools import archive_pool, get_pool_by_name
from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.input import DOCUMENT, check_value
from better_compute.decisions import Decision, Kind, acting, record
from better_compute.engine import enqueue
from better_compute.fleet.apply import write_plan
from better_compute.fleet.cost import Zones, flavor_changes
from better_compute.fleet.plan import CHANGING, Plan, PlanItem, endings, make_plan
from better_compute.fleet.prices import PriceTable
from better_compute.fleet.quota import check_quotas
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.sizes import FlavorNodes, flavor_nodes
from better_compute.fleet.snapshot import canonical_json
from better_compute.fleet.state import hold_loaded_rows, lock_tenant, read_snapshot
from better_compute.fleet.validate import validate_document
from better_compute.iam import require_tenant
from better_compute.kubernetes.names import SUBSTRATE_KIND
from better_compute.store import Database
from better_compute.vps.provider import ProviderAccount, ProviderImpl

__all__ = ["Fleet"]

Transaction = Callable[[], AbstractAsyncContextManager[AsyncSession]]
Resolver = Callable[[str, str], Awaitable[str]]
"""(reference, tenant id) -> secret value: what provider hooks get, bound to the tenant."""


class Fleet:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        providers: Mapping[str, ProviderImpl],
        wake: Callable[[], None],
        transaction: Transaction | None = None,
        resolve_secret: Resolver | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.providers = providers
        self.wake = wake
        # compute's ChangeFeed transaction, so that nodes cordoned by an archive reach bcd after commit
        self.transaction: Transaction = transaction or db.transaction
        self.resolve_secret = resolve_secret

    async def validate(self, document: Any, *, tenant_id: str) -> FleetDocument:
        # Every door (CLI, HTTP, Python API) meets the input boundary here too: what passes is storable
        # and hashable on SQLite and PostgreSQL alike.
        check_value(document, limits=DOCUMENT)
        resolver = self.resolve_secret
        if resolver is None:
            return await validate_document(document, tenant_id=tenant_id, providers=self.providers)

        async def resolve(reference: str) -> str:
            return await resolver(reference, tenant_id)

        return await validate_document(document, tenant_id=tenant_id, providers=self.providers, resolve_secret=resolve)

    async def plan(
        self, document: Any, *, tenant_id: str, prune: bool = False, prices: PriceTable | None = None
    ) -> Plan:
        """What `apply` would do now, and with `prices` (fleet/prices.py) what it costs; reads only."""
        parsed = await self.validate(document, tenant_id=tenant_id)
        async with self.db.session() as session:
            await require_tenant(session, tenant_id)
            snapshot = await read_snapshot(session, tenant_id, nodes=True)
        zones = self._zones(tenant_id)
        plan = make_plan(
            parsed,
            snapshot,
            tenant_id=tenant_id,
            prune=prune,
            node_counts=self._sizes(parsed, tenant_id),
            prices=prices,
            zones=zones,
        )
        # The providers' quotas are read with no transaction open: a slow provider holds no connection.
        changes = flavor_changes(endings(plan.items), parsed, snapshot, zones)
        quota = await check_quotas(changes, self._accounts(parsed, tenant_id), self.providers)
        return dataclasses.replace(plan, quota=quota)

    async def apply(
        self, document: Any = None, *, tenant_id: str, prune: bool = False, plan: Plan | None = None
    ) -> Plan:
        """Make the state what the document says, in one transaction; returns the plan it applied."""
        if plan is not None:
            self._check_saved(plan, tenant_id=tenant_id, prune=prune)
            prune = plan.prune
            document = plan.document if document is None else document
        parsed = await self.validate(document, tenant_id=tenant_id)
        if plan is not None and canonical_json(parsed.to_json_dict()) != canonical_json(plan.document):
            raise ComputeError(
                ErrorCode.CONFLICT, "the document differs from the one the saved plan was made from", "/document"
            )
        async with self.transaction() as session:
            hold_loaded_rows(session)
            await require_tenant(session, tenant_id)
            state = await lock_tenant(session, tenant_id)
            snapshot = await read_snapshot(session, tenant_id)
            current = make_plan(
                parsed, snapshot, tenant_id=tenant_id, prune=prune, node_counts=self._sizes(parsed, tenant_id)
            )
            if plan is not None and (plan.fingerprint != current.fingerprint or plan.items != current.items):
                raise ComputeError(
                    ErrorCode.CONFLICT,
                    "the state has moved since this plan was made; make a new plan and review it",
                    "/plan/fingerprint",
                )
            if current.blocked:
                raise ComputeError(
                    ErrorCode.INVALID_STATE,
                    f"the plan has {len(current.blocked)} blocked item(s); nothing was applied",
                    problems=[Problem(_where(parsed, i), i.reason or "blocked") for i in current.blocked],
                )
            if not current.has_changes:
                return current
            queued = await write_plan(session, current, parsed, snapshot, self.clock.now())
            await record(session, self.clock.now(), _applied(current, state.revision + 1, queued))
            # What the next plan will read, read back and hashed before commit: a value that
            # cannot be read or hashed fails here, and the whole apply rolls back.
            left = await read_snapshot(session, tenant_id)
            state.revision += 1
            state.fingerprint = left.fingerprint()
            state.applied_at = self.clock.now()
        if queued:
            self.wake()
        return current

    def _sizes(self, document: FleetDocument, tenant_id: str) -> tuple[FlavorNodes, ...]:
        return flavor_nodes(document, tenant_id=tenant_id, providers=self.providers)

    def _accounts(self, document: FleetDocument, tenant_id: str) -> dict[str, ProviderAccount]:
        """The document's accounts as drivers take them, their secrets resolved for this tenant only."""
        resolver = self.resolve_secret
        extra: dict[str, Any] = {}
        if resolver is not None:

            async def resolve(reference: str) -> str:
                return await resolver(reference, tenant_id)

            extra["resolve_secret"] = resolve
        return {
            a.name: ProviderAccount(name=a.name, provider=a.provider, tenant_id=tenant_id, config=a.config, **extra)
            for a in document.provider_accounts
        }

    def _zones(self, tenant_id: str) -> Zones:
        """How many zones a flavor's `nodes` counts in, by its provider's own rule (1: a total)."""

        def count(provider: str, config: Mapping[str, Any], zones: tuple[str, ...]) -> int:
            impl = self.providers.get(provider)
            kube = impl.kubernetes if impl is not None else None
            if kube is None or not kube.vocabulary.nodes_per_zone:
                return 1
            return kube.zone_count(
                ProviderAccount(name="", provider=provider, tenant_id=tenant_id, config=config), zones
            )

        return count

    @staticmethod
    def _check_saved(plan: Plan, *, tenant_id: str, prune: bool) -> None:
        if plan.tenant_id != tenant_id:
            raise ComputeError(ErrorCode.INVALID_INPUT, "the saved plan was made for another tenant", "/plan")
        if prune and not plan.prune:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, "the saved plan was made without --prune; plan again with --prune", "/prune"
            )

    async def archive_pool(self, name: str, *, tenant_id: str) -> Pool:
        """`better-compute pools archive NAME`: the same teardown a pruned apply starts, for one pool."""
        async with self.transaction() as session:
            pool = await get_pool_by_name(session, tenant_id=tenant_id, name=name)
            if pool is None:
                raise ComputeError(ErrorCode.NOT_FOUND, f"no pool named {name!r}", "/name")
            archived = await archive_pool(session, now=self.clock.now(), tenant_id=tenant_id, pool_id=pool.id)
            if pool.policy.get("substrate") and pool.state == "active":
                await enqueue(session, kind=SUBSTRATE_KIND, key=pool.id, now=self.clock.now())
        self.wake()
        return archived


def _where(document: FleetDocument, item: PlanItem) -> str:
    """The JSON pointer of a plan item's entry in the document."""
    section: list[Any] = document.pools if item.kind == "pool" else document.provider_accounts
    name = "pools" if item.kind == "pool" else "providerAccounts"
    index = next(i for i, entry in enumerate(section) if entry.name == item.name)
    return f"/{name}/{index}"


def _applied(plan: Plan, revision: int, queued: list[str]) -> Decision:
    """The decision log's `fleet.applied`: who applied which revision, and the counts of what changed."""
    counts = plan.counts()
    changed = ", ".join(f"{counts[a.value]} {a.value}" for a in CHANGING if counts[a.value])
    reason = f"FleetConfig revision {revision} applied: {changed}"
    details = {"revision": revision, "counts": counts, "prune": plan.prune, "substratesQueued": len(queued)}
    return Decision(Kind.PLAN_APPLIED, plan.tenant_id, reason, principal=acting(), details=details)
