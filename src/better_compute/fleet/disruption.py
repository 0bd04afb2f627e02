"""What a plan's changes do to running Nodes and their bookings: pure, from the plan's items and the snapshot.

Every change that removes or drains Nodes gets one entry, with the Nodes concerned (each with its
active bookings: count, GPUs, tenants), what happens to those bookings, and the Nodes per zone
(per Availability Zone on EKS; in total on DOKS) before and after:

    shrink          a fixed flavor's `nodes` lowered: each zone loses its surplus, and the Nodes
                    listed are the ones that go, as the substrate picks them (kubernetes/shrink.py:
                    free ones first); `bookings` is the document's `disruption.bookedNodes` (`wait`,
                    `refuse`, `end`) when one of them is booked. A flavor that had `autoscaling`
                    is resized by the provider, which picks: every Node of a shrinking zone (`end`)
    flavor-removed  a flavor taken out: its node pool is deleted at once, and the bookings on
                    its Nodes end as the Nodes go (`end`)
    teardown        a pool archived, or its substrate taken out: the Nodes are cordoned and the
                    teardown waits for every booking to end; nothing is force-released (`wait`)

`bookings` is `none` where no Node concerned holds a booking. The snapshot's Nodes are the
ones the substrate listed last, so a Node still coming up is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.sizes import FlavorNodes
from better_compute.fleet.snapshot import NodeState, Snapshot
from better_compute.kubernetes.policy import BookedNodes, Flavor, parse_substrate
from better_compute.kubernetes.shrink import Candidate, plan_shrink

__all__ = ["Disruption", "ZoneNodes", "disruptions"]

HOW = {
    "none": "no booking is touched",
    "wait": "waits for every booking to end: the Nodes are cordoned, nothing is force-released",
    "refuse": "is refused while a Node it must take is booked: nothing is removed",
    "end": "ends the bookings on the Nodes that go",
}


@dataclass(frozen=True)
class ZoneNodes:
    """A flavor's Nodes in one zone (None: where `nodes` is a total) now and once the change is made."""

    zone: str | None
    before: int
    after: int

    def to_dict(self) -> dict[str, Any]:
        return {"zone": self.zone, "before": self.before, "after": self.after}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ZoneNodes:
        zone = data.get("zone")
        return cls(str(zone) if zone is not None else None, int(data["before"]), int(data["after"]))


@dataclass(frozen=True)
class Disruption:
    """One change that removes or drains Nodes of one flavor of a pool (every flavor: `flavor` None)."""

    pool: str
    flavor: str | None
    change: str  # "shrink" | "flavor-removed" | "teardown"
    bookings: str  # "none" | "wait" | "refuse" | "end"
    nodes: tuple[NodeState, ...]
    zones: tuple[ZoneNodes, ...] = ()
    note: str = ""

    @property
    def booked(self) -> tuple[NodeState, ...]:
        return tuple(n for n in self.nodes if n.booked)

    def text(self) -> str:
        """The entry's head line, as `fleet plan` prints it."""
        where = self.pool if self.flavor is None else f"{self.pool}/{self.flavor}"
        booked = self.booked
        held = (
            f"{len(booked)} of {len(self.nodes)} Node(s) booked: {sum(n.reservations for n in booked)} booking(s), "
            f"{sum(n.gpus for n in booked)} GPU(s)"
            if booked
            else f"{len(self.nodes)} Node(s), none booked"
        )
        tail = f"; {self.note}" if self.note else ""
        return f"{where} ({self.change}): {held}; {HOW[self.bookings]}{tail}"

    def to_dict(self) -> dict[str, Any]:
        booked = self.booked
        return {
            "pool": self.pool,
            "flavor": self.flavor,
            "change": self.change,
            "bookings": self.bookings,
            "booked": {
                "nodes": len(booked),
                "reservations": sum(n.reservations for n in booked),
                "gpus": sum(n.gpus for n in booked),
                "tenants": sorted({t for n in booked for t in n.tenants}),
            },
            "nodes": [_node_dict(n) for n in self.nodes],
            "zones": [z.to_dict() for z in self.zones],
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Disruption:
        flavor = data.get("flavor")
        return cls(
            pool=str(data["pool"]),
            flavor=str(flavor) if flavor is not None else None,
            change=str(data["change"]),
            bookings=str(data["bookings"]),
            nodes=tuple(_node_of(n) for n in data.get("nodes", [])),
            zones=tuple(ZoneNodes.from_dict(z) for z in data.get("zones", [])),
            note=str(data.get("note", "")),
        )


def _node_dict(node: NodeState) -> dict[str, Any]:
    return {
        "name": node.name,
        "flavor": node.flavor,
        "zone": node.zone,
        "joined": node.joined,
        "reservations": node.reservations,
        "gpus": node.gpus,
        "tenants": list(node.tenants),
    }


def _node_of(data: Mapping[str, Any]) -> NodeState:
    return NodeState(
        name=str(data["name"]),
        flavor=data.get("flavor"),
        zone=data.get("zone"),
        joined=bool(data.get("joined", False)),
        reservations=int(data.get("reservations", 0)),
        gpus=int(data.get("gpus", 0)),
        tenants=tuple(str(t) for t in data.get("tenants", [])),
    )


def _by_zone(nodes: Iterable[NodeState]) -> dict[str | None, list[NodeState]]:
    zones: dict[str | None, list[NodeState]] = {}
    for node in nodes:
        zones.setdefault(node.zone, []).append(node)
    return zones


def _zones(nodes: Iterable[NodeState], after: int | None, per_zone: bool) -> tuple[ZoneNodes, ...]:
    """Nodes now and after, per zone where `per_zone`, else in total; `after` None: none stay."""
    if not per_zone:
        listed = list(nodes)
        return (ZoneNodes(None, len(listed), after or 0),)
    return tuple(
        ZoneNodes(zone, len(members), after or 0)
        for zone, members in sorted(_by_zone(nodes).items(), key=lambda z: z[0] or "")
    )


def _bookings(nodes: Iterable[NodeState], how: str) -> str:
    return how if any(n.booked for n in nodes) else "none"


def _entry(pool: str, flavor: str | None, change: str, how: str, nodes: list[NodeState], **rest: Any) -> Disruption:
    return Disruption(pool, flavor, change, _bookings(nodes, how), tuple(nodes), **rest)


def _shrink(
    pool: str, old: Flavor, flavor: Flavor, nodes: list[NodeState], sizes: FlavorNodes | None, booked: BookedNodes
) -> Disruption | None:
    per_zone = sizes is not None and sizes.zones is not None
    zones = _zones(nodes, flavor.nodes, per_zone)
    shrinking = {z.zone for z in zones if z.before > z.after}
    if not shrinking:
        return None
    if old.autoscaling is not None:  # the autoscaler's count is written as it is: the provider picks
        concerned = [n for n in nodes if not per_zone or n.zone in shrinking]
        removed = sum(z.before - z.after for z in zones if z.before > z.after)
        note = f"removes {removed} Node(s); the provider picks which of these go"
        return _entry(pool, flavor.name, "shrink", "end", concerned, zones=zones, note=note)
    states = {n.name: n for n in nodes}
    candidates = [Candidate(n.name, n.zone or "", n.joined, n.reservations, n.gpus) for n in nodes]
    shrink = plan_shrink(flavor.name, candidates, flavor.nodes, per_zone=per_zone, booked_nodes=booked)
    if shrink is None:
        return None
    going = [states[c.name] for c in shrink.remove]
    note = f"removes {', '.join(n.name for n in going)} (free Nodes first, then the least booked)"
    return Disruption(pool, flavor.name, "shrink", shrink.how(), tuple(going), zones, note)


def _flavors(policy: Mapping[str, Any]) -> dict[str, Flavor]:
    substrate = policy.get("substrate")
    return {f.name: f for f in parse_substrate(substrate).flavors} if isinstance(substrate, dict) else {}


def disruptions(
    document: FleetDocument,
    snapshot: Snapshot,
    *,
    teardowns: Iterable[str],
    node_counts: tuple[FlavorNodes, ...],
) -> tuple[Disruption, ...]:
    """Every entry of a plan whose pools named in `teardowns` lose their substrate (archived, or
    taken out) and whose document is `document`; pools without listed Nodes have none."""
    sizes = {(n.pool, n.flavor): n for n in node_counts}
    found: list[Disruption] = []
    tearing = set(teardowns)
    for name in sorted(tearing):
        nodes = list(snapshot.nodes.get(name, ()))
        if nodes:
            per_zone = any(n.zone for n in nodes)
            found.append(_entry(name, None, "teardown", "wait", nodes, zones=_zones(nodes, None, per_zone)))
    for spec in document.pools:
        state = snapshot.pools.get(spec.name)
        if state is None or spec.name in tearing or spec.policy.substrate is None:
            continue
        nodes = list(snapshot.nodes.get(spec.name, ()))
        old = _flavors(state.policy)
        new = {f.name: f for f in spec.policy.substrate.flavors}
        for flavor_name in sorted(old):
            members = [n for n in nodes if n.flavor == flavor_name]
            flavor = new.get(flavor_name)
            if flavor is None and members:
                per_zone = any(n.zone for n in members)
                zones = _zones(members, None, per_zone)
                note = "its node pool is deleted at once"
                found.append(_entry(spec.name, flavor_name, "flavor-removed", "end", members, zones=zones, note=note))
            elif flavor is not None and flavor.autoscaling is None and members:
                # fewer Nodes than listed: lowered now, or a shrink still waiting (or refused) that this changes
                booked = spec.policy.substrate.booked_nodes
                shrink = _shrink(
                    spec.name, old[flavor_name], flavor, members, sizes.get((spec.name, flavor_name)), booked
                )
                if shrink is not None:
                    found.append(shrink)
    return tuple(found)
