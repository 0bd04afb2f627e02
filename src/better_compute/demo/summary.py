"""What the demo did, as one record: the end table, and the JSON `--json` prints for CI."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from better_compute.kubernetes.calls import Call

__all__ = ["PoolResult", "Summary", "calls_by_api"]


@dataclass
class PoolResult:
    provider: str
    ready: bool = False
    ready_after_seconds: float | None = None
    nodes_joined: int = 0


@dataclass
class Summary:
    """Filled in by the story's steps; `to_dict` is the `--json` output."""

    pools: dict[str, PoolResult] = field(default_factory=dict)
    clusters_created: set[str] = field(default_factory=set)
    nodes_joined: set[str] = field(default_factory=set)
    reservations: list[dict[str, Any]] = field(default_factory=list)
    scaled: list[dict[str, Any]] = field(default_factory=list)
    preemptions: list[dict[str, Any]] = field(default_factory=list)
    replacements: list[dict[str, Any]] = field(default_factory=list)
    left_after_prune: dict[str, int] | None = None
    adopted: dict[str, Any] | None = None
    provider_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    bcd_joins: int = 0
    simulated_seconds: float = 0.0
    wall_seconds: float = 0.0
    kept: dict[str, str] | None = None

    def made(self) -> dict[str, int]:
        return {
            "clusters": len(self.clusters_created),
            "nodesJoined": len(self.nodes_joined),
            "bcdJoins": self.bcd_joins,
            "reservations": len(self.reservations) + len(self.preemptions) + len(self.replacements),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": {
                name: {
                    "provider": p.provider,
                    "ready": p.ready,
                    "readyAfterSeconds": p.ready_after_seconds,
                    "nodesJoined": p.nodes_joined,
                }
                for name, p in self.pools.items()
            },
            "made": self.made(),
            "reservations": self.reservations,
            "scaled": self.scaled,
            "preemptions": self.preemptions,
            "replacements": self.replacements,
            "leftAfterPrune": self.left_after_prune,
            "adopted": self.adopted,
            "providerCalls": self.provider_calls,
            "simulatedSeconds": round(self.simulated_seconds, 1),
            "wallSeconds": round(self.wall_seconds, 1),
            "kept": self.kept,
        }


def calls_by_api(calls: Counter[Call]) -> dict[str, dict[str, int]]:
    """{api: {"reads": n, "writes": m}} from the CALLS tally's counts (the api is a provider or kubernetes)."""
    result: dict[str, dict[str, int]] = {}
    for call, count in sorted(calls.items()):
        entry = result.setdefault(call.api, {"reads": 0, "writes": 0})
        entry["reads" if call.access == "read" else "writes"] += count
    return result
