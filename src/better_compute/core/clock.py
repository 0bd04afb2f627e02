"""Time for domain code comes from here, never from the wall.

`SystemClock` is the production clock. `SimClock` is advanced by tests, the demo
and the benchmarks, so that the spec's durations (600 s, 15 minutes, 6 hours) are
exact and cost no real time. `within` races work against a clock's sleep, for every
wait that ends at the first of the two.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

__all__ = ["Clock", "Elapsed", "SimClock", "SystemClock", "within"]

T = TypeVar("T")


class Clock(Protocol):
    """Where the time comes from."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` on this clock."""
        ...


class Elapsed(Exception):
    """`within`'s time passed on the clock before the work finished (the work was cancelled)."""


async def within(clock: Clock, seconds: float, work: Awaitable[T]) -> T:
    """`work`'s result, or Elapsed once `seconds` pass first on `clock`; neither is left running."""
    task = asyncio.ensure_future(work)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, timer, return_exceptions=True)
    if task.cancelled():
        raise Elapsed(f"{seconds:g} s passed")
    return task.result()


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def monotonic(self) -> float:
        return time.monotonic()


class SimClock:
    """A clock that moves only when told to.

    `sleep` registers a waiter that wakes when `advance` (or `advance_to`) moves the
    clock past its deadline. `next_wakeup` lets a driver jump straight to the next
    event instead of stepping. `on_advance` tells a listener each new time, so a copy of
    the clock elsewhere (another process's SimClock) can follow this one.
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("SimClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._waiters: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._listeners: list[Callable[[datetime], None]] = []

    def now(self) -> datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (self._now + timedelta(seconds=seconds), next(self._seq), future))
        await future

    def next_wakeup(self) -> datetime | None:
        """The earliest deadline of a live sleeper, if any."""
        while self._waiters and self._waiters[0][2].done():
            heapq.heappop(self._waiters)
        return self._waiters[0][0] if self._waiters else None

    def on_advance(self, listener: Callable[[datetime], None]) -> Callable[[], None]:
        """Call `listener(now)` each time the clock moves; returns what stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def advance(self, seconds: float) -> None:
        """Move the clock forward and wake every sleeper that is now due."""
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self.advance_to(self._now + timedelta(seconds=seconds))

    def advance_to(self, when: datetime) -> None:
        if when < self._now:
            raise ValueError("a clock never goes back")
        self._now = when
        for listener in self._listeners:
            listener(when)
        while self._waiters and self._waiters[0][0] <= self._now:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.get_loop().call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
