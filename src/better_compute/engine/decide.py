"""The one place that decides what happens after a run: a pure function, no I/O.

`decide` turns how a run ended (an `Outcome` or the exception it raised) into a
`Completion`: the item's next due time, its consecutive-failure count and the error
to record. The apply step in `queue.py` writes it under the lease token.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact
from better_compute.engine.outcome import Outcome, PermanentError, TemporaryError
from better_compute.engine.schedules import DEFAULT_ERROR_BACKOFF, schedule

__all__ = ["Completion", "Result", "decide"]

_MAX_ERROR = 2000


class Result(StrEnum):
    """How a run ended, as counted in the metrics."""

    DONE = "done"
    REQUEUE = "requeue"
    RETRY = "retry"
    PERMANENT = "permanent"


@dataclass(frozen=True)
class Completion:
    """The update one run makes to its work item."""

    result: Result
    due_at: datetime | None
    attempts: int
    last_error: str | None
    delay: float | None


def decide(ended: Outcome | BaseException, *, now: datetime, attempts: int) -> Completion:
    """The item's next state; `attempts` is its consecutive failures before this run."""
    if isinstance(ended, Outcome):
        if ended.after is None:
            return Completion(Result.DONE, None, 0, None, None)
        return Completion(Result.REQUEUE, now + timedelta(seconds=ended.after), 0, None, ended.after)
    failures = attempts + 1
    message = _describe(ended)
    if isinstance(ended, PermanentError):
        return Completion(Result.PERMANENT, None, failures, message, None)
    delay = retry_delay(ended, failures)
    return Completion(Result.RETRY, now + timedelta(seconds=delay), failures, message, delay)


def retry_delay(error: BaseException, failures: int) -> float:
    """Seconds until the retry: the error's own delay, its schedule, or the default backoff."""
    if isinstance(error, TemporaryError):
        if error.delay is not None:
            return error.delay
        if error.schedule is not None:
            return schedule(error.schedule).delay(failures)
    if isinstance(error, ComputeError) and error.code is ErrorCode.UNAVAILABLE and error.retry_after is not None:
        return max(0.0, error.retry_after)
    return DEFAULT_ERROR_BACKOFF.delay(failures)


def _describe(error: BaseException) -> str:
    text = redact(f"{type(error).__name__}: {error}")
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 3] + "..."
