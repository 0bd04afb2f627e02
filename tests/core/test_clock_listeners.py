"""`SimClock.on_advance`: a listener hears every move of the clock until it stops listening."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from better_compute.core.clock import SimClock


def test_a_listener_hears_each_new_time_until_it_stops() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    clock = SimClock(start)
    heard: list[datetime] = []
    stop = clock.on_advance(heard.append)
    clock.advance(5)
    clock.advance_to(start + timedelta(minutes=1))
    stop()
    clock.advance(5)
    assert heard == [start + timedelta(seconds=5), start + timedelta(minutes=1)]
    assert clock.now() == start + timedelta(seconds=65)
