"""The substrate run's loop (substrates/steps.py): every step runs unless a step it needs failed, errors
are gathered in order, the soonest requeue wins, updates are laid over one another, and each condition
keeps its `since` while its status holds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.substrates.nodes_step import NodesSeen
from better_compute.kubernetes.substrates.reconciler import STEPS
from better_compute.kubernetes.substrates.steps import (
    StepContext,
    StepResult,
    Update,
    conditions_json,
    gathered,
    run_steps,
    skipped,
)


class Scripted:
    """A step that answers what it was given, recording that it ran and what the steps before it found."""

    def __init__(self, name: str, result: StepResult | Exception, needs: tuple[str, ...] = ()) -> None:
        self.name, self.needs, self.result = name, needs, result
        self.saw: list[StepContext] = []

    async def run(self, ctx: StepContext) -> StepResult:
        self.saw.append(ctx)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


SEEN = NodesSeen(("n1", "n2"), ("n1",), ("n2",), 0, None)


async def test_a_failing_step_skips_only_the_steps_that_need_it(steps: Callable[..., Any]) -> None:
    nodes = Scripted("nodes", StepResult("nodes", "error", "listing the substrate's Nodes: 503"))
    shrink = Scripted("shrink", StepResult("shrink", "ok"), needs=("nodes",))
    bcd = Scripted("bcd", StepResult("bcd", "ok", update=Update(applied=True)))
    upgrade = Scripted("upgrade", StepResult("upgrade", "error", "upgrading to 1.32: refused", 30.0))
    ran = await run_steps([nodes, shrink, bcd, upgrade], steps().ctx)
    assert [(r.condition, r.status) for r in ran.results] == [
        ("nodes", "error"),
        ("shrink", "skipped"),
        ("bcd", "ok"),
        ("upgrade", "error"),
    ]
    assert shrink.saw == [] and len(bcd.saw) == 1 and len(upgrade.saw) == 1
    assert ran.results[1].message == "needs nodes, which did not succeed"
    assert ran.errors == ["listing the substrate's Nodes: 503", "upgrading to 1.32: refused"]
    assert ran.update.applied


async def test_the_soonest_requeue_wins_and_waiting_messages_are_gathered(steps: Callable[..., Any]) -> None:
    ran = await run_steps(
        [
            Scripted("a", StepResult("a", "ok", requeue_after=300.0)),
            Scripted("b", StepResult("b", "waiting", "flavor a waits", 30.0)),
            Scripted("c", StepResult("c", "waiting", "upgrading to 1.32", 45.0, in_message=False)),
            Scripted("d", StepResult("d", "waiting", "Node n1 waits to be replaced")),
        ],
        steps().ctx,
    )
    assert ran.requeue(60.0) == 30.0
    assert ran.waiting == ["flavor a waits", "Node n1 waits to be replaced"], "an upgrade's progress is its own"
    assert ran.errors == []
    quiet = await run_steps([Scripted("a", StepResult("a", "ok"))], steps().ctx)
    assert quiet.requeue(60.0) == 60.0, "no step asked: the settled substrate's watch"


async def test_a_step_that_raises_is_an_error_and_the_rest_run(steps: Callable[..., Any]) -> None:
    boom = Scripted("shrink", ComputeError(ErrorCode.UNAVAILABLE, "uncordoning Node n1: 503"))
    after = Scripted("bcd", StepResult("bcd", "ok"))
    ran = await run_steps([boom, after], steps().ctx)
    assert ran.results[0] == StepResult("shrink", "error", "could not reach the cluster: uncordoning Node n1: 503")
    assert len(after.saw) == 1


async def test_later_steps_see_what_earlier_ones_found(steps: Callable[..., Any]) -> None:
    nodes = Scripted("nodes", StepResult("nodes", "ok", update=Update(listed=(), seen=SEEN)))
    join = Scripted("join", StepResult("join", "ok"), needs=("nodes",))
    ran = await run_steps([nodes, join], steps().ctx)
    assert join.saw[0].seen == SEEN
    assert ran.update.seen == SEEN


def test_gathered_says_error_then_waiting_then_ok() -> None:
    assert gathered("s", ["x", "y"], ["w"]) == StepResult("s", "error", "x; y", 30.0)
    assert gathered("s", [], ["w1", "w2"]) == StepResult("s", "waiting", "w1; w2", 30.0)
    assert gathered("s", [], [], busy=True, done="asked") == StepResult("s", "ok", "asked", 30.0)
    assert gathered("s", [], []) == StepResult("s", "ok")


def test_a_condition_keeps_its_since_while_its_status_holds() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    first = conditions_json([StepResult("nodes", "ok", "1 listed"), StepResult("bcd", "error", "503")], None, t0)
    assert first == [
        {"name": "nodes", "status": "ok", "message": "1 listed", "since": t0.isoformat()},
        {"name": "bcd", "status": "error", "message": "503", "since": t0.isoformat()},
    ]
    t1 = t0 + timedelta(minutes=5)
    second = conditions_json([StepResult("nodes", "ok", "2 listed"), StepResult("bcd", "ok", "applied")], first, t1)
    assert second[0] == {"name": "nodes", "status": "ok", "message": "2 listed", "since": t0.isoformat()}
    assert second[1]["since"] == t1.isoformat(), "its status changed: since now"


def test_the_reconciler_runs_every_step_once_in_order_with_its_prerequisites() -> None:
    assert [(s.name, s.needs) for s in STEPS] == [
        ("nodes", ()),
        ("shrink", ("nodes",)),
        ("replace", ("nodes",)),
        ("bcd", ()),
        ("join", ("nodes",)),
        ("upgrade", ()),
    ]
    assert [r.status for r in skipped([s.name for s in STEPS], "the cluster is provisioning")] == ["skipped"] * 6
