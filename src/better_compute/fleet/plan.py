"""From a validated document and a snapshot of the state to a Plan: pure, no I/O.

Each site, provider account and pool gets one item:

    create     in the document, not in the state
    update     in both, and some fields differ (the changes list them old -> new)
    unchanged  in both, the same
    delete     in the state, not in the document, and `prune` was asked for
    keep       a change held back: a removal without `prune`, or one still in use
    blocked    a change that cannot be made in place (a substrate's identity)

A substrate's identity is its account and the cluster's place (`create.location`,
`create.privateNodes`, or the adopted id); a plan that changes it is blocked, since
the running cluster cannot become another one: create a new pool instead. Sizing
(nodes, autoscaling, flavors added or removed) changes in place. Taking only
`policy.substrate` out of a pool that stays tears the substrate down, and only with
`prune`; without it the substrate is kept. Putting a substrate back while the one taken
out is still being torn down is blocked (with the teardown's state) until the teardown
has finished: its cordons, retirements and account hold are the teardown's to end.

Beside the items, a plan shows what each flavor's `nodes` comes to (fleet/sizes.py) and the
Nodes and bookings each change removes or drains (fleet/disruption.py), and, with the operator's
price table, what the changes cost per hour (fleet/cost.py), and the providers' quotas for what the
changes add (fleet/quota.py, read by the service); none of these is compared when a saved plan is
applied.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from better_compute.fleet.cost import After, Cost, Zones, flavor_changes, plan_cost
from better_compute.fleet.diff import Change, diff
from better_compute.fleet.disruption import Disruption, disruptions
from better_compute.fleet.prices import PriceTable
from better_compute.fleet.quota import QuotaCheck
from better_compute.fleet.schema import FleetDocument, PoolSpec
from better_compute.fleet.sizes import FlavorNodes
from better_compute.fleet.snapshot import PoolState, Snapshot
from better_compute.kubernetes.policy import Substrate, parse_substrate

__all__ = ["Action", "Plan", "PlanItem", "SubstrateAction", "endings", "make_plan", "pool_record"]

PLAN_FORMAT = 1


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    DELETE = "delete"
    KEEP = "keep"
    BLOCKED = "blocked"


class SubstrateAction(StrEnum):
    """What the item asks of the pool's substrate reconciler."""

    CREATE = "create"
    UPDATE = "update"
    TEARDOWN = "teardown"
    KEEP = "keep"


CHANGING = (Action.CREATE, Action.UPDATE, Action.DELETE)
KINDS = ("site", "account", "pool")


@dataclass(frozen=True)
class PlanItem:
    kind: str  # "site" | "account" | "pool"
    name: str
    action: Action
    id: str | None = None
    changes: tuple[Change, ...] = ()
    reason: str | None = None
    notes: tuple[str, ...] = ()
    substrate: SubstrateAction | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind, "name": self.name, "action": self.action.value}
        if self.id is not None:
            body["id"] = self.id
        if self.changes:
            body["changes"] = [c.to_dict() for c in self.changes]
        if self.reason is not None:
            body["reason"] = self.reason
        if self.notes:
            body["notes"] = list(self.notes)
        if self.substrate is not None:
            body["substrate"] = self.substrate.value
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanItem:
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            action=Action(data["action"]),
            id=data.get("id"),
            changes=tuple(Change.from_dict(c) for c in data.get("changes", [])),
            reason=data.get("reason"),
            notes=tuple(str(n) for n in data.get("notes", [])),
            substrate=SubstrateAction(data["substrate"]) if data.get("substrate") else None,
        )


@dataclass(frozen=True)
class Plan:
    """What an apply of `document` would do to the state whose fingerprint it carries."""

    tenant_id: str
    prune: bool
    fingerprint: str
    document: dict[str, Any]
    items: tuple[PlanItem, ...] = field(default=())
    node_counts: tuple[FlavorNodes, ...] = field(default=())
    """What each flavor's `nodes` comes to at its provider (fleet/sizes.py); shown, never compared."""
    disruption: tuple[Disruption, ...] = field(default=())
    """The Nodes and bookings each change removes or drains (fleet/disruption.py); shown, never compared."""
    cost: Cost | None = None
    """With a price table: each change's cost per hour (fleet/cost.py); shown, never compared."""
    quota: tuple[QuotaCheck, ...] = field(default=())
    """The providers' quotas for what the changes add (fleet/quota.py); shown, never compared."""

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every quota the changes would exceed, and every one that could not be read."""
        return tuple(w for check in self.quota for w in check.warnings)

    @property
    def blocked(self) -> list[PlanItem]:
        return [i for i in self.items if i.action is Action.BLOCKED]

    @property
    def has_changes(self) -> bool:
        return any(i.action in CHANGING for i in self.items)

    def counts(self) -> dict[str, int]:
        counted = Counter(i.action.value for i in self.items)
        return {a.value: counted.get(a.value, 0) for a in Action}

    def item(self, kind: str, name: str) -> PlanItem:
        for candidate in self.items:
            if candidate.kind == kind and candidate.name == name:
                return candidate
        raise KeyError(f"{kind} {name}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "tenantId": self.tenant_id,
            "prune": self.prune,
            "fingerprint": self.fingerprint,
            "summary": self.counts(),
            "items": [i.to_dict() for i in self.items],
            "nodeCounts": [n.to_dict() for n in self.node_counts],
            "disruption": [d.to_dict() for d in self.disruption],
            "cost": self.cost.to_dict() if self.cost is not None else None,
            "quota": [q.to_dict() for q in self.quota],
            "warnings": list(self.warnings),
            "document": self.document,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """A plan saved by `fleet plan --out`; a malformed one is INVALID_INPUT."""
        from better_compute.core.errors import ComputeError, ErrorCode
        from better_compute.core.input import quote

        try:
            if data.get("format") != PLAN_FORMAT:
                raise ValueError(f"unknown plan format {quote(data.get('format'))}")
            return cls(
                tenant_id=str(data["tenantId"]),
                prune=bool(data["prune"]),
                fingerprint=str(data["fingerprint"]),
                document=dict(data["document"]),
                items=tuple(PlanItem.from_dict(i) for i in data["items"]),
                node_counts=tuple(FlavorNodes.from_dict(n) for n in data.get("nodeCounts", [])),
                disruption=tuple(Disruption.from_dict(d) for d in data.get("disruption", [])),
                cost=Cost.from_dict(data["cost"]) if data.get("cost") is not None else None,
                quota=tuple(QuotaCheck.from_dict(q) for q in data.get("quota", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"not a saved fleet plan: {exc}") from exc


BLOCKED_HINT = "create a new pool instead"


def pool_record(spec: PoolSpec) -> dict[str, Any]:
    """A pool as the plan compares it: the document's own keys."""
    return {
        "site": spec.site,
        "class": spec.pool_class,
        "gpuModel": spec.gpu_model,
        "policy": spec.policy.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def _state_record(pool: PoolState) -> dict[str, Any]:
    return {"site": pool.site, "class": pool.pool_class, "gpuModel": pool.gpu_model, "policy": pool.policy}


def _identity_change(old: Substrate, new: Substrate) -> str | None:
    """Why the substrate cannot change in place, or None when its identity holds."""
    reason = old.identity_change(new)
    return None if reason is None else f"{reason}; {BLOCKED_HINT}"


def _shape_notes(old: Substrate, new: Substrate) -> list[str]:
    """Flavors whose node shape changes: the provider cannot reshape a node pool."""
    return [
        f"flavor {name} changes {', '.join(moved)}: node pools never change shape, so the "
        "substrate reports an error for it; give the new shape a new flavor name to replace its node pool"
        for name, moved in old.reshaped(new)
    ]


def _plan_pool(spec: PoolSpec, state: PoolState | None, prune: bool, archiving: set[str]) -> PlanItem:
    desired = pool_record(spec)
    new_substrate = desired["policy"].get("substrate")
    if state is None and spec.name in archiving:
        return PlanItem(
            "pool",
            spec.name,
            Action.BLOCKED,
            changes=tuple(diff({}, desired)),
            reason=f"a pool named {spec.name!r} is still being torn down: apply again once it is archived, "
            "or give the new pool another name",
        )
    if state is None:
        return PlanItem(
            "pool",
            spec.name,
            Action.CREATE,
            changes=tuple(diff({}, desired)),
            substrate=SubstrateAction.CREATE if new_substrate else None,
        )
    current = _state_record(state)
    old_substrate = current["policy"].get("substrate")
    notes: list[str] = []
    substrate: SubstrateAction | None = None
    if old_substrate and not new_substrate:
        if prune:
            substrate = SubstrateAction.TEARDOWN
            notes.append("its substrate is taken out of the pool: the nodes drain and the cluster is torn down")
        else:
            substrate = SubstrateAction.KEEP
            notes.append("substrate kept: taking policy.substrate out of a pool tears it down only with --prune")
            desired["policy"]["substrate"] = old_substrate
    elif old_substrate and spec.policy.substrate is not None:
        was, will = parse_substrate(old_substrate), spec.policy.substrate
        reason = _identity_change(was, will)
        if reason is not None:
            return PlanItem(
                "pool", spec.name, Action.BLOCKED, id=state.id, changes=tuple(diff(current, desired)), reason=reason
            )
        notes.extend(_shape_notes(was, will))
        if diff(old_substrate, new_substrate):
            substrate = SubstrateAction.UPDATE
    elif new_substrate and state.teardown is not None:
        return PlanItem(
            "pool",
            spec.name,
            Action.BLOCKED,
            id=state.id,
            changes=tuple(diff(current, desired)),
            reason=f"the substrate taken out of this pool is still being torn down ({state.teardown}): "
            "apply again once its teardown has finished",
        )
    elif new_substrate:
        substrate = SubstrateAction.CREATE
    changes = tuple(diff(current, desired))
    if changes:
        action = Action.UPDATE
    elif substrate is SubstrateAction.KEEP:
        action = Action.KEEP
    else:
        action = Action.UNCHANGED
    return PlanItem("pool", spec.name, action, id=state.id, changes=changes, notes=tuple(notes), substrate=substrate)


def _plan_gone_pool(state: PoolState, prune: bool) -> PlanItem:
    has_substrate = bool(state.policy.get("substrate"))
    if not prune:
        note = "not in the document: --prune would archive it" + (
            " and tear down its substrate" if has_substrate else ""
        )
        return PlanItem(
            "pool",
            state.name,
            Action.KEEP,
            id=state.id,
            notes=(note,),
            substrate=SubstrateAction.KEEP if has_substrate else None,
        )
    note = "archived" + (": its nodes drain and its substrate is torn down" if has_substrate else "")
    return PlanItem(
        "pool",
        state.name,
        Action.DELETE,
        id=state.id,
        notes=(note,),
        substrate=SubstrateAction.TEARDOWN if has_substrate else None,
    )


def _plan_gone(kind: str, name: str, item_id: str, in_use: str | None, prune: bool) -> PlanItem:
    if not prune:
        return PlanItem(kind, name, Action.KEEP, id=item_id, notes=("not in the document: --prune would delete it",))
    if in_use is not None:
        return PlanItem(kind, name, Action.KEEP, id=item_id, notes=(in_use,))
    return PlanItem(kind, name, Action.DELETE, id=item_id)


def _in_use(users: list[str], archived: bool = False) -> str | None:
    if users:
        return f"still used by pool {', '.join(users)}; prune again once their teardown has finished"
    if archived:
        return "kept: archived pools of this site keep their history in it"
    return None


def _held(holders: tuple[str, ...]) -> str | None:
    if not holders:
        return None
    return f"still needed by {', '.join(holders)}; prune again once that teardown has finished"


def _adopted(policy: dict[str, Any]) -> tuple[str, str] | None:
    substrate = policy.get("substrate")
    return parse_substrate(substrate).adopted() if isinstance(substrate, dict) else None


def _held_elsewhere(item: PlanItem, document: FleetDocument, snapshot: Snapshot) -> PlanItem:
    """One cluster backs one pool: a substrate that starts adopting a cluster another pool of the
    fleet still holds (kept, or being torn down) is blocked until that one lets go."""
    if item.substrate is not SubstrateAction.CREATE:
        return item
    spec = next(p for p in document.pools if p.name == item.name)
    wanted = spec.policy.substrate.adopted() if spec.policy.substrate is not None else None
    holders = [
        p.name
        for p in (*snapshot.pools.values(), *snapshot.archiving)
        if p.name != item.name and _adopted(p.policy) == wanted
    ]
    if wanted is None or not holders:
        return item
    return PlanItem(
        "pool",
        item.name,
        Action.BLOCKED,
        id=item.id,
        changes=item.changes,
        reason=f"cluster {json.dumps(wanted[1])} of account {json.dumps(wanted[0])} is still held by pool "
        f"{', '.join(sorted(holders))}: one cluster backs one pool; apply again once its substrate is deleted",
    )


def make_plan(
    document: FleetDocument,
    snapshot: Snapshot,
    *,
    tenant_id: str,
    prune: bool = False,
    node_counts: tuple[FlavorNodes, ...] = (),
    prices: PriceTable | None = None,
    zones: Zones | None = None,
) -> Plan:
    """The plan for a document that validate.py accepted (`node_counts` from fleet/sizes.py); with
    `prices`, its cost too (`zones` counts each provider's zones, as sizes.py does)."""
    items: list[PlanItem] = []
    after_pools = {p.name for p in document.pools}
    archiving = {p.name for p in snapshot.archiving}
    pool_items = [_plan_pool(p, snapshot.pools.get(p.name), prune, archiving) for p in document.pools]
    pool_items = [_held_elsewhere(i, document, snapshot) for i in pool_items]
    pool_items += [_plan_gone_pool(s, prune) for n, s in sorted(snapshot.pools.items()) if n not in after_pools]
    # Pools that stay or are created keep their site and account; those pruned now, and the
    # substrates taken out of a pool now, still hold them until their teardown ends, like
    # the ones already archiving (and the account holds of earlier teardowns).
    leaving = Snapshot(
        pools={
            i.name: snapshot.pools[i.name]
            for i in pool_items
            if i.action is Action.DELETE or (i.action is Action.UPDATE and i.substrate is SubstrateAction.TEARDOWN)
        },
        archiving=snapshot.archiving,
        archived_sites=snapshot.archived_sites,
    )

    for site in document.sites:
        record = {"kind": site.kind, "region": site.region}
        state = snapshot.sites.get(site.name)
        if state is None:
            items.append(PlanItem("site", site.name, Action.CREATE, changes=tuple(diff({}, record))))
            continue
        changes = tuple(diff({"kind": state.kind, "region": state.region}, record))
        items.append(
            PlanItem("site", site.name, Action.UPDATE if changes else Action.UNCHANGED, id=state.id, changes=changes)
        )
    named_sites = {s.name for s in document.sites}
    for name, site_state in sorted(snapshot.sites.items()):
        if name not in named_sites:
            in_use = _in_use(leaving.users_of_site(name), name in leaving.archived_sites)
            items.append(_plan_gone("site", name, site_state.id, in_use, prune))

    for account in document.provider_accounts:
        account_record: dict[str, Any] = {"provider": account.provider, "config": account.config}
        account_state = snapshot.accounts.get(account.name)
        if account_state is None:
            items.append(PlanItem("account", account.name, Action.CREATE, changes=tuple(diff({}, account_record))))
            continue
        current = {"provider": account_state.provider, "config": account_state.config}
        changes = tuple(diff(current, account_record))
        if account_state.provider != account.provider:
            items.append(
                PlanItem(
                    "account",
                    account.name,
                    Action.BLOCKED,
                    id=account_state.id,
                    changes=changes,
                    reason=f"the provider changes {json.dumps(account_state.provider)} → {json.dumps(account.provider)}: "
                    "an account never changes provider; create a new account instead",
                )
            )
            continue
        items.append(
            PlanItem(
                "account",
                account.name,
                Action.UPDATE if changes else Action.UNCHANGED,
                id=account_state.id,
                changes=changes,
            )
        )
    named_accounts = {a.name for a in document.provider_accounts}
    for name, acc_state in sorted(snapshot.accounts.items()):
        if name not in named_accounts:
            in_use = _in_use(leaving.users_of_account(name)) or _held(snapshot.account_holds.get(name, ()))
            items.append(_plan_gone("account", name, acc_state.id, in_use, prune))

    items.extend(pool_items)
    teardowns = [i.name for i in pool_items if i.substrate is SubstrateAction.TEARDOWN]
    cost = None
    if prices is not None:
        cost = plan_cost(flavor_changes(endings(pool_items), document, snapshot, zones or (lambda *_: 1)), prices)
    return Plan(
        tenant_id=tenant_id,
        prune=prune,
        fingerprint=snapshot.fingerprint(),
        document=document.to_json_dict(),
        items=tuple(items),
        node_counts=node_counts,
        disruption=disruptions(document, snapshot, teardowns=teardowns, node_counts=node_counts),
        cost=cost,
    )


def endings(items: Iterable[PlanItem]) -> dict[str, After]:
    """Whose flavors each pool has once the plan is applied; blocked pools are left out."""
    return {i.name: _after(i) for i in items if i.kind == "pool" and i.action is not Action.BLOCKED}


def _after(item: PlanItem) -> After:
    """Whose flavors a pool has once its item is applied."""
    if item.action is Action.DELETE or item.substrate is SubstrateAction.TEARDOWN:
        return "none"
    if item.action is Action.KEEP or item.substrate is SubstrateAction.KEEP:
        return "state"
    return "document"
