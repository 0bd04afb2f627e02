"""Which Nodes a shrink removes, and what it does with the booked ones: pure, no I/O.

When a flavor without `autoscaling` asks for fewer Nodes, the substrate picks the machines
that go instead of letting the provider pick (a provider removes whichever it likes, a
booked one as soon as a free one). The order:

    1. free Nodes: no active booking (one whose bcd never joined first, then by name)
    2. booked Nodes, least disturbed first: the fewest booked GPUs, then the fewest
       reservations, then by name

Reservations carry no end time, so "whose bookings end soonest" cannot be read off them;
the fewest GPUs booked is the least work cut short, and the order is stable from run to
run. Where the provider counts `nodes` per zone (GKE, EKS), each zone keeps `nodes` and
loses only its own surplus. A booked Node among those picked is what the document's
`policy.substrate.disruption.bookedNodes` decides about: `wait` (cordoned, removed once its
bookings end), `refuse` (nothing is removed, and the substrate says why), or `end` (its bookings are
ended and it goes).

The same function answers the plan and the substrate's step, so the plan names the Nodes
the apply takes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from better_compute.kubernetes.policy import BookedNodes

__all__ = ["Candidate", "Shrink", "choose", "plan_shrink"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A Node of the flavor as the shrink weighs it."""

    name: str
    zone: str = ""
    """Where the provider counts `nodes` per zone, the Node's zone (`topology.kubernetes.io/zone`)."""
    joined: bool = True
    """Whether a pool node runs on it (its bcd joined)."""
    reservations: int = 0
    gpus: int = 0
    """GPUs its active reservations hold."""

    @property
    def booked(self) -> bool:
        return self.reservations > 0


@dataclass(frozen=True, slots=True)
class Shrink:
    """What a shrink of one flavor does: the Nodes it removes, and what it does with the booked ones."""

    flavor: str
    remove: tuple[Candidate, ...]
    booked_nodes: BookedNodes

    @property
    def booked(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.remove if c.booked)

    @property
    def refused(self) -> bool:
        """True when the shrink can only be met by taking a booked Node and the document refuses that."""
        return self.booked_nodes == "refuse" and bool(self.booked)

    def how(self) -> str:
        """What happens to the booked Nodes it takes: `none` when every Node taken is free."""
        return self.booked_nodes if self.booked else "none"


def _order(candidate: Candidate) -> tuple[bool, int, int, bool, str]:
    return (candidate.booked, candidate.gpus, candidate.reservations, candidate.joined, candidate.name)


def choose(nodes: Iterable[Candidate], keep: int, *, per_zone: bool) -> tuple[Candidate, ...]:
    """The Nodes that go so that `keep` stay (in each zone where `per_zone`), in the order above."""
    groups: dict[str, list[Candidate]] = {}
    for node in nodes:
        groups.setdefault(node.zone if per_zone else "", []).append(node)
    chosen: list[Candidate] = []
    for zone in sorted(groups):
        ordered = sorted(groups[zone], key=_order)
        chosen.extend(ordered[: max(0, len(ordered) - keep)])
    return tuple(sorted(chosen, key=_order))


def plan_shrink(
    flavor: str, nodes: Iterable[Candidate], keep: int, *, per_zone: bool, booked_nodes: BookedNodes
) -> Shrink | None:
    """The shrink of `flavor` down to `keep` Nodes (per zone where `per_zone`), or None when nothing goes."""
    remove = choose(nodes, keep, per_zone=per_zone)
    return Shrink(flavor, remove, booked_nodes) if remove else None
