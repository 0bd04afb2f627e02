"""core.clock.within: the one race of work against a clock's sleep (the gateway's hello, the engine's idle)."""

from __future__ import annotations

import asyncio

import pytest

from better_compute.core.clock import Elapsed, SimClock, within


async def test_work_that_finishes_first_answers_and_its_timer_is_gone() -> None:
    clock = SimClock()
    assert await within(clock, 30, asyncio.sleep(0, result="hello")) == "hello"
    assert clock.next_wakeup() is None


async def test_the_clock_passing_first_cancels_the_work_and_raises_elapsed() -> None:
    clock = SimClock()
    never = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    race = asyncio.create_task(within(clock, 30, work()))
    while clock.next_wakeup() is None:
        await asyncio.sleep(0)
    clock.advance(29)
    await asyncio.sleep(0)
    assert not race.done()
    clock.advance(1)
    with pytest.raises(Elapsed, match="30 s passed"):
        await race
    assert cancelled.is_set()


async def test_the_work_s_own_error_is_its_own_not_elapsed() -> None:
    async def work() -> None:
        raise TimeoutError("the work's own timeout")

    with pytest.raises(TimeoutError, match="own timeout"):
        await within(SimClock(), 30, work())
