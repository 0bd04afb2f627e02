"""Which Nodes a shrink takes (kubernetes/shrink.py): free ones first, then the least booked, and never more
than a zone's own surplus where the provider counts per zone. Pure: no store, no network."""

from __future__ import annotations

import pytest

from better_compute.kubernetes.policy import BookedNodes
from better_compute.kubernetes.shrink import Candidate, choose, plan_shrink

FREE = Candidate("node-c")
BOOKED_SMALL = Candidate("node-a", reservations=1, gpus=2)
BOOKED_BIG = Candidate("node-b", reservations=2, gpus=8)


def names(nodes: tuple[Candidate, ...]) -> list[str]:
    return [n.name for n in nodes]


def test_a_free_node_goes_before_any_booked_one_whatever_the_names() -> None:
    assert names(choose([BOOKED_SMALL, BOOKED_BIG, FREE], keep=2, per_zone=False)) == ["node-c"]


def test_then_the_least_booked_node_goes_first() -> None:
    assert names(choose([BOOKED_BIG, BOOKED_SMALL, FREE], keep=1, per_zone=False)) == ["node-c", "node-a"]
    fewer_reservations = Candidate("node-z", reservations=1, gpus=8)
    assert names(choose([BOOKED_BIG, fewer_reservations], keep=1, per_zone=False)) == ["node-z"]


def test_among_free_nodes_one_whose_bcd_never_joined_goes_first() -> None:
    joined, unjoined = Candidate("node-a"), Candidate("node-b", joined=False)
    assert names(choose([joined, unjoined], keep=1, per_zone=False)) == ["node-b"]


def test_nothing_goes_when_the_flavor_keeps_as_many_as_it_has() -> None:
    assert choose([FREE, BOOKED_BIG], keep=2, per_zone=False) == ()
    assert choose([FREE], keep=3, per_zone=False) == ()
    assert plan_shrink("h100", [FREE], 1, per_zone=False, booked_nodes="wait") is None


def test_per_zone_each_zone_loses_only_its_own_surplus() -> None:
    zone_a = [Candidate("a-1", zone="z-a"), Candidate("a-2", zone="z-a", reservations=1, gpus=8)]
    zone_b = [
        Candidate("b-1", zone="z-b", reservations=1, gpus=8),
        Candidate("b-2", zone="z-b", reservations=1, gpus=1),
    ]
    chosen = choose([*zone_a, *zone_b], keep=1, per_zone=True)
    assert names(chosen) == ["a-1", "b-2"], "a free Node of one zone never stands in for another zone's surplus"
    assert names(choose([*zone_a, *zone_b], keep=2, per_zone=False)) == ["a-1", "b-2"]


@pytest.mark.parametrize(
    ("booked_nodes", "how", "refused"),
    [("wait", "wait", False), ("refuse", "refuse", True), ("end", "end", False)],
)
def test_the_document_decides_only_when_a_booked_node_must_go(
    booked_nodes: BookedNodes, how: str, refused: bool
) -> None:
    nodes = [BOOKED_SMALL, BOOKED_BIG, FREE]
    free_only = plan_shrink("h100", nodes, 2, per_zone=False, booked_nodes=booked_nodes)
    assert free_only is not None and free_only.how() == "none" and not free_only.refused
    taking = plan_shrink("h100", nodes, 1, per_zone=False, booked_nodes=booked_nodes)
    assert taking is not None and taking.how() == how and taking.refused is refused
    assert names(taking.remove) == ["node-c", "node-a"] and names(taking.booked) == ["node-a"]
