"""The replace step (`replace`): failing Nodes that wait are `waiting`; a machine asked of the provider
this run is `ok` and asks to be looked at again soon; a failed call is the error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from better_compute.kubernetes.substrates import replace_step
from better_compute.kubernetes.substrates.nodes_step import ListedNode
from better_compute.kubernetes.substrates.replace_step import ReplaceStep, Replacing
from better_compute.kubernetes.substrates.step_run import StepRun
from better_compute.kubernetes.substrates.steps import SOON, StepResult

LISTED = (ListedNode("n1", False, node_pool="gpu-a", provider_id="gce://n1"),)


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (Replacing(), StepResult("replace", "ok")),
        (Replacing(replaced=["n1"]), StepResult("replace", "ok", "asked the provider to replace Node(s) n1", SOON)),
        (Replacing(waiting=["Node n1 is replaced once its 1 booking(s) end"]),
         StepResult("replace", "waiting", "Node n1 is replaced once its 1 booking(s) end", SOON)),
        (Replacing(errors=["replacing Node n1: quota"], replaced=["n2"]),
         StepResult("replace", "error", "replacing Node n1: quota", SOON)),
    ],
)  # fmt: skip
async def test_what_the_step_found_is_its_condition(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, found: Replacing, expected: StepResult
) -> None:
    fakes = steps(listed=LISTED)
    calls: list[tuple[StepRun, list[ListedNode]]] = []

    async def replace(s: StepRun, listed: list[ListedNode]) -> Replacing:
        calls.append((s, listed))
        return found

    monkeypatch.setattr(replace_step, "replace_failing", replace)
    assert await ReplaceStep().run(fakes.ctx) == expected
    s, listed = calls[0]
    assert listed == list(LISTED)
    assert (s.cluster_id, s.tenant_id, s.pool_id, s.client) == (
        "projects/p/locations/l/clusters/c",
        "tenant-1",
        "pool-1",
        "client",
    )
