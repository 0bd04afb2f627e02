"""A cap on joins in flight, so that a herd of new nodes is told to come back, not kept waiting.

A join holds a slot from the identity check to its commit. When a thousand nodes of a new
pool join at once, the joins past what the database can commit within bcd's 30 s timeout
would otherwise wait, time out at the node and be retried, each after the control plane
had done all its work for an answer nobody read. One over the cap is refused at once with
UNAVAILABLE (503) and `Retry-After`; bcd retries it after its back-off. The count, the cap
and the refusals are in /metrics; docs/input-limits.md lists the default.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["JOIN_RETRY_AFTER", "MAX_JOINS_IN_FLIGHT", "JoinLimit"]

MAX_JOINS_IN_FLIGHT = 64
"""Joins one replica works on at once, by default: on SQLite they commit one after another in
milliseconds each, so 64 wait well under bcd's timeout."""

JOIN_RETRY_AFTER = 2.0
"""Seconds a refused join is told to wait (bcd adds its own jittered back-off)."""

IN_FLIGHT = Gauge("better_compute_gateway_joins_in_flight", "Joins this replica is working on now.")
LIMIT = Gauge("better_compute_gateway_joins_in_flight_limit", "The cap on joins in flight on this replica.")
REFUSED = Counter("better_compute_gateway_joins_refused_busy", "Joins refused because the cap was reached.")


class JoinLimit:
    """Counts joins in flight; `slot()` holds one, or raises UNAVAILABLE when all are taken."""

    def __init__(self, cap: int = MAX_JOINS_IN_FLIGHT) -> None:
        if cap < 1:
            raise ValueError("the cap on joins in flight is at least 1")
        self.cap = cap
        self._count = 0
        LIMIT.set(cap)

    @property
    def count(self) -> int:
        return self._count

    @contextmanager
    def slot(self) -> Iterator[None]:
        if self._count >= self.cap:
            REFUSED.inc()
            raise ComputeError(
                ErrorCode.UNAVAILABLE,
                f"the control plane is working on {self._count} joins, its limit; try again shortly",
                retry_after=JOIN_RETRY_AFTER,
            )
        self._count += 1
        IN_FLIGHT.inc()
        try:
            yield
        finally:
            self._count -= 1
            IN_FLIGHT.dec()
