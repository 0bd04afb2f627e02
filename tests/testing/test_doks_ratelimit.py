"""The DOKS emulator's rate limiter never lets more through than a window allows, and retry-after is honest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from better_compute.testing.doks.ratelimit import RateLimiter

START = datetime(2026, 1, 1, tzinfo=UTC)


@settings(max_examples=100, deadline=None)
@given(
    per_minute=st.integers(1, 5),
    per_hour=st.integers(1, 12),
    gaps=st.lists(st.floats(0, 40, allow_nan=False), min_size=1, max_size=80),
)
def test_windows_hold_and_waiting_retry_after_is_enough(per_minute: int, per_hour: int, gaps: list[float]) -> None:
    limiter = RateLimiter(per_hour=per_hour, per_minute=per_minute)
    now = START
    allowed: list[datetime] = []
    for gap in gaps:
        now += timedelta(seconds=gap)
        verdict = limiter.check("t", now)
        if verdict.allowed:
            allowed.append(now)
            assert "retry-after" not in verdict.headers
        else:
            wait = int(verdict.headers["retry-after"])
            assert wait >= 1
            assert limiter.check("t", now + timedelta(seconds=wait)).allowed
            allowed.append(now + timedelta(seconds=wait))
            now += timedelta(seconds=wait)
        in_minute = [t for t in allowed if t > now - timedelta(minutes=1)]
        in_hour = [t for t in allowed if t > now - timedelta(hours=1)]
        assert len(in_minute) <= per_minute and len(in_hour) <= per_hour
        assert int(verdict.headers["ratelimit-limit"]) == per_hour
