"""The shrink step (`shrink`): nothing is done (nor fenced) without a pending shrink or a Node a shrink
marked; otherwise the shrink is carried on after a fence, and what it found is the condition: refusals
are errors, shrinks that wait are `waiting` and ask to be looked at again soon."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from better_compute.kubernetes.substrates import shrink_step
from better_compute.kubernetes.substrates.nodes_step import ListedNode
from better_compute.kubernetes.substrates.shrink_step import PendingShrink, Shrinking, ShrinkRun, ShrinkStep
from better_compute.kubernetes.substrates.steps import SOON

PENDING = (PendingShrink("a100", "np-1", "gpu-a", 1),)
LISTED = (ListedNode("n1", False, node_pool="gpu-a"), ListedNode("n2", False, node_pool="gpu-a"))


def fake(found: Shrinking, calls: list[tuple[Any, ...]], events: list[str]) -> Any:
    async def shrink(s: ShrinkRun, pending: tuple[PendingShrink, ...], listed: list[ListedNode]) -> Shrinking:
        events.append("shrink")
        calls.append((s, pending, listed))
        return found

    return shrink


async def test_nothing_to_shrink_is_ok_without_a_call(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = steps(listed=LISTED)
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(shrink_step, "shrink_flavors", fake(Shrinking(), calls, fakes.events))
    result = await ShrinkStep().run(fakes.ctx)
    assert (result.status, result.message, result.requeue_after) == ("ok", "no shrink pending", None)
    assert calls == [] and fakes.events == []


async def test_a_node_a_shrink_marked_is_looked_at_without_a_pending_shrink(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    marked = (ListedNode("n1", False, node_pool="gpu-a", leaving="cordoned"),)
    fakes = steps(listed=marked)
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(shrink_step, "shrink_flavors", fake(Shrinking(), calls, fakes.events))
    result = await ShrinkStep().run(fakes.ctx)
    assert fakes.events == ["fence", "shrink"] and calls[0][1:] == ((), list(marked))
    assert (result.status, result.message) == ("ok", "no shrink waits")


async def test_a_shrink_that_waits_asks_to_be_looked_at_soon(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = steps(listed=LISTED, shrinks=PENDING, booked_nodes="end")
    calls: list[tuple[Any, ...]] = []
    waits = Shrinking(waiting=["flavor a100: shrinking to 1 Node(s) waits", "flavor b: waits"])
    monkeypatch.setattr(shrink_step, "shrink_flavors", fake(waits, calls, fakes.events))
    result = await ShrinkStep().run(fakes.ctx)
    assert fakes.events == ["fence", "shrink"]
    s, pending, listed = calls[0]
    assert (pending, listed) == (PENDING, list(LISTED))
    assert (s.cluster_id, s.tenant_id, s.pool_id, s.booked_nodes) == (
        "projects/p/locations/l/clusters/c",
        "tenant-1",
        "pool-1",
        "end",
    )
    assert (result.status, result.message, result.requeue_after) == (
        "waiting",
        "flavor a100: shrinking to 1 Node(s) waits; flavor b: waits",
        SOON,
    )


async def test_a_refusal_is_the_error(steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = steps(listed=LISTED, shrinks=PENDING)
    refused = Shrinking(errors=["flavor a100: shrinking to 1 Node(s) would take booked Node(s) n1"])
    monkeypatch.setattr(shrink_step, "shrink_flavors", fake(refused, [], fakes.events))
    result = await ShrinkStep().run(fakes.ctx)
    assert (result.status, result.message) == (
        "error",
        "flavor a100: shrinking to 1 Node(s) would take booked Node(s) n1",
    )
