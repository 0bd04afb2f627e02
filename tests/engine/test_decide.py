"""The decision after a run is a pure function: tested here without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from better_compute.core.errors import ComputeError
from better_compute.core.redaction import REDACTED, redact_value
from better_compute.engine import Outcome, PermanentError, TemporaryError
from better_compute.engine.decide import Result, decide

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_done_rests_the_item_and_clears_failures() -> None:
    completion = decide(Outcome.done(), now=NOW, attempts=4)
    assert (completion.result, completion.due_at, completion.attempts, completion.last_error) == (
        Result.DONE,
        None,
        0,
        None,
    )


def test_requeue_comes_back_after_its_delay() -> None:
    completion = decide(Outcome.requeue(after=30), now=NOW, attempts=2)
    assert completion.result is Result.REQUEUE
    assert completion.due_at == NOW + timedelta(seconds=30)
    assert completion.attempts == 0


def test_temporary_error_with_a_delay_uses_it() -> None:
    completion = decide(TemporaryError("busy", delay=7), now=NOW, attempts=0)
    assert completion.result is Result.RETRY
    assert completion.due_at == NOW + timedelta(seconds=7)
    assert completion.attempts == 1
    assert completion.last_error == "TemporaryError: busy"


def test_temporary_error_with_a_schedule_counts_consecutive_failures() -> None:
    delays = [decide(TemporaryError("x", schedule="delete"), now=NOW, attempts=n).delay for n in range(5)]
    assert delays == [300, 600, 1200, 2400, 4800]


def test_unavailable_compute_error_honours_retry_after() -> None:
    error = ComputeError("UNAVAILABLE", "throttled", retry_after=42)
    assert decide(error, now=NOW, attempts=3).due_at == NOW + timedelta(seconds=42)


def test_other_errors_take_the_default_backoff() -> None:
    assert decide(RuntimeError("boom"), now=NOW, attempts=0).delay == 1
    assert decide(ComputeError("INVALID_STATE", "no"), now=NOW, attempts=2).delay == 4


def test_permanent_error_stops_retrying() -> None:
    completion = decide(PermanentError("bad document"), now=NOW, attempts=1)
    assert completion.result is Result.PERMANENT
    assert completion.due_at is None
    assert completion.attempts == 2


def test_recorded_errors_are_redacted() -> None:
    redact_value("canary-in-an-error-9f8e7d")
    completion = decide(RuntimeError("token canary-in-an-error-9f8e7d leaked"), now=NOW, attempts=0)
    assert completion.last_error is not None
    assert "canary-in-an-error-9f8e7d" not in completion.last_error
    assert REDACTED in completion.last_error


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        Outcome.requeue(after=-1)
    with pytest.raises(ValueError):
        TemporaryError("x", delay=1, schedule="delete")
