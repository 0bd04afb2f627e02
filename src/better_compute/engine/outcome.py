"""What a reconcile run can end with: an Outcome, or one of two errors.

    Outcome.done()            nothing more to do until someone enqueues the item again
    Outcome.requeue(after=N)  run again in N seconds (polling an operation, say)
    raise TemporaryError      retry with backoff: `delay=` seconds, or a named schedule
    raise PermanentError      stop retrying; the item waits for a new enqueue
    any other exception       treated as temporary, with the default backoff

The engine alone turns these into the item's next due time (see `decide.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaseLost", "Outcome", "PermanentError", "TemporaryError"]


@dataclass(frozen=True)
class Outcome:
    """How a run ended well: `after` is None for done, else seconds until the next run."""

    after: float | None = None

    @classmethod
    def done(cls) -> Outcome:
        return cls(None)

    @classmethod
    def requeue(cls, after: float) -> Outcome:
        if after < 0:
            raise ValueError("requeue needs a delay of zero or more seconds")
        return cls(float(after))


class TemporaryError(Exception):
    """A failure worth retrying later: after `delay` seconds or by the named schedule."""

    def __init__(self, message: str, *, delay: float | None = None, schedule: str | None = None) -> None:
        if delay is not None and schedule is not None:
            raise ValueError("give a delay or a schedule, not both")
        if delay is not None and delay < 0:
            raise ValueError("a retry delay is zero or more seconds")
        super().__init__(message)
        self.delay = delay
        self.schedule = schedule


class PermanentError(Exception):
    """A failure that retrying cannot fix; the item rests until it is enqueued again."""


class LeaseLost(Exception):
    """Raised by `RunContext.fence` (and `heartbeat`) once the run's lease has expired or passed to another worker."""
