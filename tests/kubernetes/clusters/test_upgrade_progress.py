"""The drain's progress as the state read shows it, and as the cluster's row keeps it (no I/O)."""

from __future__ import annotations

from better_compute.kubernetes.clusters.upgrades import UpgradeProgress
from better_compute.kubernetes.provider import version_matches


def test_each_listed_node_is_done_draining_or_waiting_and_the_row_keeps_it_all() -> None:
    progress = UpgradeProgress(to="1.32", from_version="1.31.2", started_at="2026-01-01T00:00:00+00:00")
    progress.done, progress.drained, progress.draining = ["a"], ["a", "b"], "c"
    progress.kept_cordoned, progress.pools_done, progress.message = ["b"], ["gpu"], "waiting"
    view = progress.view(("a", "b", "c", "d", "e"))
    assert (view["from"], view["to"], view["nodePoolsDone"]) == ("1.31.2", "1.32", ["gpu"])
    assert view["nodesDone"] == ["a"]
    assert view["nodesDraining"] == ["b", "c"]
    assert view["nodesWaiting"] == ["d", "e"]
    assert UpgradeProgress.from_json(progress.to_json()) == progress


def test_a_node_that_left_the_cluster_is_not_shown() -> None:
    progress = UpgradeProgress(to="1.32", from_version="1.31", started_at="", drained=["gone"], draining="gone")
    assert progress.view(("x",))["nodesDraining"] == [] and progress.view(("x",))["nodesWaiting"] == ["x"]


def test_a_fuller_version_matches_the_one_asked_and_no_other() -> None:
    assert version_matches("1.31.2-gke.1115000", "1.31")
    assert version_matches("v1.33.1", "1.33")
    assert version_matches("1.32.2-do.0", "1.32.2")
    assert not version_matches("1.310.0", "1.31")
    assert not version_matches("1.30.5", "1.31")
