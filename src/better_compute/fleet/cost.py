"""What a plan's changes cost per hour, from the operator's price table: pure, no I/O.

Each flavor whose Nodes the plan changes (created, resized, autoscaling bounds moved, removed, torn
down) gets one line: its Nodes and its cost per hour before and after, and the difference. Nodes
are what the flavor asks its provider for (`nodes` times its zones where it counts per zone); an
autoscaled flavor is a range, its bounds, so every figure is a pair `[at the lower bound, at the
upper bound]` (the same number twice for a fixed count). A flavor whose machine type the table
does not price is listed as unpriced, and left out of the total: never guessed.

Before is the fleet as the state has it; after is the document for the pools the plan creates
or updates, nothing for those it archives or whose substrate it tears down, and the state again
for what it keeps. A blocked pool is left out: apply refuses the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from better_compute.fleet.prices import PriceTable
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.snapshot import Snapshot
from better_compute.kubernetes.policy import Flavor, Substrate, parse_substrate

__all__ = ["After", "Cost", "CostLine", "FlavorChange", "Zones", "flavor_changes", "plan_cost"]

Range = tuple[int, int]
Money = tuple[float, float]
Zones = Callable[[str, Mapping[str, Any], tuple[str, ...]], int]
"""(provider, account config, flavor zones) -> what `nodes` multiplies by (1 where it is a total)."""
After = Literal["document", "state", "none"]
"""What a pool's flavors are once the plan is applied: the document's, the state's (kept), or none."""


def _money(value: float) -> float:
    return round(value, 6)


def _pair(values: Any) -> tuple[Any, Any]:
    low, high = values
    return low, high


@dataclass(frozen=True)
class CostLine:
    """One flavor's Nodes and cost per hour, now and after the change; `price` None: unpriced."""

    pool: str
    flavor: str
    provider: str
    machine_type: str
    spot: bool
    before: Range
    after: Range
    price: float | None

    def per_hour(self, nodes: Range) -> Money | None:
        if self.price is None:
            return None
        return _money(nodes[0] * self.price), _money(nodes[1] * self.price)

    @property
    def delta(self) -> Money | None:
        before, after = self.per_hour(self.before), self.per_hour(self.after)
        if before is None or after is None:
            return None
        return _money(after[0] - before[0]), _money(after[1] - before[1])

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "flavor": self.flavor,
            "provider": self.provider,
            "machineType": self.machine_type,
            "spot": self.spot,
            "pricePerHour": self.price,
            "nodes": {"before": list(self.before), "after": list(self.after)},
            "perHour": (
                None
                if self.price is None
                else {
                    "before": list(self.per_hour(self.before) or ()),
                    "after": list(self.per_hour(self.after) or ()),
                    "delta": list(self.delta or ()),
                }
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostLine:
        price = data.get("pricePerHour")
        return cls(
            pool=str(data["pool"]),
            flavor=str(data["flavor"]),
            provider=str(data["provider"]),
            machine_type=str(data["machineType"]),
            spot=bool(data["spot"]),
            before=_pair(int(n) for n in data["nodes"]["before"]),
            after=_pair(int(n) for n in data["nodes"]["after"]),
            price=float(price) if price is not None else None,
        )


@dataclass(frozen=True)
class Cost:
    """Every changed flavor's line; `delta` sums the priced ones."""

    currency: str
    lines: tuple[CostLine, ...]

    @property
    def unpriced(self) -> tuple[CostLine, ...]:
        return tuple(line for line in self.lines if line.price is None)

    @property
    def delta(self) -> Money:
        deltas = [line.delta for line in self.lines if line.delta is not None]
        return _money(sum(d[0] for d in deltas)), _money(sum(d[1] for d in deltas))

    def to_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "changes": [line.to_dict() for line in self.lines],
            "delta": list(self.delta),
            "unpriced": [
                {"pool": u.pool, "flavor": u.flavor, "provider": u.provider, "machineType": u.machine_type}
                | {"spot": u.spot}
                for u in self.unpriced
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cost:
        return cls(str(data["currency"]), tuple(CostLine.from_dict(line) for line in data["changes"]))


@dataclass(frozen=True)
class FlavorChange:
    """A flavor whose Nodes a plan changes: what it asks its provider for before and after, and where.

    `account` and `place` (the substrate's `cluster.create.location`, or its adopted id) are the
    document's where the flavor stays or comes, the state's where it goes."""

    pool: str
    flavor: Flavor
    provider: str
    account: str
    place: str
    before: Range
    after: Range


@dataclass(frozen=True)
class _Sized:
    provider: str
    account: str
    place: str
    flavor: Flavor
    nodes: Range


def _place(substrate: Substrate) -> str:
    create = substrate.cluster.create
    return create.location if create is not None else str(substrate.cluster.adopt)


def _sized(
    substrate: Substrate | None, accounts: Mapping[str, tuple[str, Mapping[str, Any]]], zones: Zones
) -> dict[str, _Sized]:
    """Each flavor of a substrate with the Nodes it asks for (its bounds where it autoscales)."""
    if substrate is None or substrate.account not in accounts:
        return {}
    provider, config = accounts[substrate.account]
    sized: dict[str, _Sized] = {}
    for flavor in substrate.flavors:
        times = zones(provider, config, tuple(flavor.zones or ()))
        bounds = flavor.autoscaling
        low, high = (bounds.min_nodes, bounds.max_nodes) if bounds is not None else (flavor.nodes, flavor.nodes)
        sized[flavor.name] = _Sized(provider, substrate.account, _place(substrate), flavor, (low * times, high * times))
    return sized


def flavor_changes(
    pools: Mapping[str, After], document: FleetDocument, snapshot: Snapshot, zones: Zones
) -> tuple[FlavorChange, ...]:
    """Every flavor of a plan made of `document` against `snapshot` whose Nodes change, the pools
    ending as `pools` says (a pool not named there is left out: blocked)."""
    state_accounts = {a.name: (a.provider, a.config) for a in snapshot.accounts.values()}
    doc_accounts = {a.name: (a.provider, a.config) for a in document.provider_accounts}
    specs = {p.name: p for p in document.pools}
    changes: list[FlavorChange] = []
    for name, after in pools.items():
        state = snapshot.pools.get(name)
        old = state.policy.get("substrate") if state is not None else None
        was = _sized(parse_substrate(old) if isinstance(old, dict) else None, state_accounts, zones)
        spec = specs.get(name)
        if after == "none":
            will: dict[str, _Sized] = {}
        elif after == "state" or spec is None:
            will = was
        else:
            will = _sized(spec.policy.substrate, doc_accounts, zones)
        for flavor in sorted(was.keys() | will.keys()):
            before, now = was.get(flavor), will.get(flavor)
            shown = now or before
            nodes = (before.nodes if before else (0, 0)), (now.nodes if now else (0, 0))
            if shown is not None and nodes[0] != nodes[1]:
                changes.append(
                    FlavorChange(name, shown.flavor, shown.provider, shown.account, shown.place, nodes[0], nodes[1])
                )
    return tuple(changes)


def plan_cost(changes: tuple[FlavorChange, ...], prices: PriceTable) -> Cost:
    """Each changed flavor priced from the table (unpriced where the table does not name its machine type)."""
    lines = [
        CostLine(
            c.pool,
            c.flavor.name,
            c.provider,
            c.flavor.machine_type,
            c.flavor.spot,
            c.before,
            c.after,
            prices.price(c.provider, c.flavor.machine_type, spot=c.flavor.spot),
        )
        for c in changes
    ]
    return Cost(prices.currency, tuple(lines))
