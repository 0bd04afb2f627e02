"""The placement rule, as a pure function."""

from __future__ import annotations

from better_compute.compute.placement import Candidate, rank


def c(name: str, free: int, *, spot: bool = False, connected: bool = True) -> Candidate:
    return Candidate(node_id=f"node_{name}", name=name, spot=spot, connected=connected, free=free)


def names(candidates: list[Candidate]) -> list[str]:
    return [x.name for x in candidates]


def test_on_demand_bookings_never_rank_a_spot_node() -> None:
    nodes = [c("spot", 8, spot=True), c("small", 1), c("big", 8)]
    assert names(rank(nodes, 2, spot=False)) == ["big"]
    assert names(rank(nodes, 1, spot=False)) == ["small", "big"]
    assert rank([c("spot", 8, spot=True)], 1, spot=False) == []


def test_spot_bookings_prefer_spot_nodes_and_may_use_any() -> None:
    nodes = [c("a-regular", 2), c("z-spot", 8, spot=True)]
    assert names(rank(nodes, 2, spot=True)) == ["z-spot", "a-regular"]


def test_connected_nodes_then_best_fit_then_name() -> None:
    nodes = [c("away", 1, connected=False), c("b", 4), c("a", 4), c("tight", 2), c("full", 1)]
    assert names(rank(nodes, 2, spot=False)) == ["tight", "a", "b"]
    assert names(rank(nodes, 1, spot=False)) == ["full", "tight", "a", "b", "away"]
