"""The substrate lifecycle's timeline: segments between recorded state changes, the last one to now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from better_compute.api.console.timeline import MOMENT, WIDTH, timeline

START = datetime(2026, 1, 1, tzinfo=UTC)


def _change(seconds: float, was: str | None, state: str, message: str | None = None) -> dict[str, Any]:
    """An event as GET /v1/events answers a `substrate.state-changed` one."""
    at = (START + timedelta(seconds=seconds)).isoformat()
    return {"at": at, "kind": "substrate.state-changed", "details": {"from": was, "to": state, "message": message}}


def test_each_state_holds_from_its_change_to_the_next_and_the_last_to_now() -> None:
    events = [
        _change(0, None, "provisioning"),
        _change(300, "provisioning", "ready"),
        _change(900, "ready", "error", "x"),
    ]
    drawn = timeline(events, START + timedelta(seconds=1000))
    assert [(s.state, s.x, s.width) for s in drawn.segments] == [
        ("provisioning", 0.0, 300.0),
        ("ready", 300.0, 600.0),
        ("error", 900.0, 100.0),
    ]
    assert drawn.segments[-1].end == START + timedelta(seconds=1000)
    assert drawn.segments[-1].message == "x"
    assert drawn.summary == "The substrate was provisioning, then ready, then error (now error)."
    assert [c["to"] for c in drawn.changes] == ["provisioning", "ready", "error"]


def test_a_state_held_for_a_moment_is_still_drawn_and_within_the_axis() -> None:
    events = [_change(0, None, "provisioning"), _change(1000, "provisioning", "ready")]
    drawn = timeline(events, START + timedelta(seconds=1000))
    last = drawn.segments[-1]
    assert last.width >= MOMENT - 1e-9
    assert last.x + last.width <= WIDTH
    assert not last.labelled  # too narrow for its name in the picture; the list beside it names it


def test_no_recorded_change_draws_nothing() -> None:
    drawn = timeline([], START)
    assert drawn.segments == [] and drawn.start is None
    assert drawn.summary == "No state changes recorded yet."
