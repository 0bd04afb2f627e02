"""Where a booking goes: the placement rule as a pure function, tested without a database.

A node qualifies when it is ready (the caller's query says so), has at least the asked
number of free GPUs, and, for an on-demand (non-spot) booking, is not a spot node.
Among those: a spot booking prefers spot nodes; connected nodes come before nodes
whose bcd is away; then best fit (the fewest free GPUs that still suffice, to keep
big nodes whole for big bookings); then the name, so that placement is repeatable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Candidate", "rank", "why"]


@dataclass(frozen=True, slots=True)
class Candidate:
    node_id: str
    name: str
    spot: bool
    connected: bool
    free: int


def rank(candidates: Iterable[Candidate], gpu_count: int, spot: bool) -> list[Candidate]:
    """The nodes a booking of `gpu_count` GPUs may go to, best first."""
    eligible = [c for c in candidates if c.free >= gpu_count and (spot or not c.spot)]
    return sorted(eligible, key=lambda c: (spot and not c.spot, not c.connected, c.free, c.name, c.node_id))


def why(best: Candidate, ranked: list[Candidate], gpu_count: int, spot: bool) -> str:
    """Why a booking went to `best` (`ranked[0]`), as the rule decided it: the decision log's reason."""
    parts = []
    if spot:
        parts.append("a Spot booking takes Spot capacity first" if best.spot else "no Spot node had room")
    if not best.connected:
        parts.append("no node with bcd connected had room (its bcd is away)")
    parts.append(
        f"best fit: {best.free} free GPU(s), the fewest of the {len(ranked)} ready node(s) with room for {gpu_count}"
    )
    return "; ".join(parts)
