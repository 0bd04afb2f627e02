"""A fixed flavor's lower count waits in its node-pool row for the substrate's shrink step to record it."""

from __future__ import annotations

from better_compute.kubernetes.clusters.records import held_back
from better_compute.kubernetes.provider import Autoscaling
from better_compute.kubernetes.tables import NodePoolRow


def row(node_count: int, scaling: Autoscaling | None = None) -> NodePoolRow:
    return NodePoolRow(
        node_count=node_count,
        min_nodes=scaling.min_nodes if scaling else None,
        max_nodes=scaling.max_nodes if scaling else None,
    )


def test_only_a_fixed_flavor_asking_for_fewer_nodes_is_held_back() -> None:
    assert held_back(row(3), 2, None), "the substrate picks which machines go"
    assert not held_back(row(3), 3, None) and not held_back(row(3), 4, None), "the same or more is written at once"
    assert not held_back(row(3), 1, Autoscaling(1, 3)), "an autoscaled flavor owns only its bounds"
    assert not held_back(row(3, Autoscaling(1, 3)), 1, None), "taking autoscaling off writes the count as it is"
