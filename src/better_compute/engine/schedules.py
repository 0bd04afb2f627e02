"""Retry and backoff schedules, as data in one table.

Reconcilers never compute delays themselves: they raise `TemporaryError` (with an
explicit `delay=` or a `schedule=` name) and the engine looks the delay up here by
the item's count of consecutive failures (`core.backoff.Backoff`, the schedule bcd uses
too). The spec's durations live in this file only, so a test can check each one exactly on the simulated clock:

    name       first   growth  cap
    default    1 s     x2      300 s    any unexpected error
    delete     300 s   x2      21600 s  5, 10, 20, 40 minutes ... 6 hours
    adopt      120 s   x1      120 s    the 2 minute adopt retry
"""

from __future__ import annotations

from better_compute.core.backoff import Backoff

__all__ = ["ADOPT_RETRY", "DEFAULT_ERROR_BACKOFF", "DELETE_BACKOFF", "SCHEDULES", "Backoff", "schedule"]


DEFAULT_ERROR_BACKOFF = Backoff("default", first=1.0, factor=2.0, cap=300.0)
DELETE_BACKOFF = Backoff("delete", first=300.0, factor=2.0, cap=21600.0)
ADOPT_RETRY = Backoff("adopt", first=120.0, factor=1.0, cap=120.0)

SCHEDULES: dict[str, Backoff] = {b.name: b for b in (DEFAULT_ERROR_BACKOFF, DELETE_BACKOFF, ADOPT_RETRY)}


def schedule(name: str) -> Backoff:
    """The schedule called `name`; an unknown name is a programming error."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown backoff schedule {name!r}; known: {', '.join(sorted(SCHEDULES))}") from None
