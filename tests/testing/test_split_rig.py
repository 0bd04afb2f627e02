"""The split rig's clock: the world's SimClock, followed by another process's (bench/fleet_split.py runs the whole rig)."""

from __future__ import annotations

import asyncio

from better_compute.core.clock import SimClock
from better_compute.testing.rig.clock import ClockPublisher, FollowedClock


async def test_a_followed_clock_answers_each_time_it_is_sent_and_wakes_its_sleepers() -> None:
    world = SimClock()
    async with ClockPublisher(world) as publisher:
        # made in a thread: it reads the world's time with a blocking socket, as serve does before its loop runs
        followed = await asyncio.to_thread(FollowedClock, publisher.address)
        try:
            await follow(world, publisher, followed)
        finally:
            followed.close()


async def follow(world: SimClock, publisher: ClockPublisher, followed: FollowedClock) -> None:
    assert followed.now() == world.now()
    assert await publisher.synced(timeout=5)  # the first time, read when made, is answered too
    sleeper = asyncio.create_task(followed.sleep(30))
    await asyncio.sleep(0.05)
    world.advance(10)
    assert await publisher.synced(timeout=5)
    assert followed.now() == world.now()
    assert not sleeper.done()
    world.advance(25)
    assert await publisher.synced(timeout=5)
    assert sleeper.done()  # woken before the follower answered
