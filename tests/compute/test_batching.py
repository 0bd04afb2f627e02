"""Concurrent bookings with mixed outcomes: each request gets its own answer.

On SQLite concurrent bookings share one transaction (group commit); on PostgreSQL each
is its own. The rules are the same either way, and one bad request never spoils another.
"""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from pathlib import Path

import pytest

from better_compute.compute import Reservation
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.store import Database

from .conftest import World, make_world


async def test_one_bad_request_never_spoils_the_others(world: World) -> None:
    regular = await world.node("regular", 4)
    spot = await world.node("spot", 4, spot=True)
    await world.compute.quotas.set(world.tenant.id, "H100", 7)
    other = await world.iam.create_tenant("other")
    r = world.compute.reservations
    commits: list[list[str]] = []

    async def listener(node_ids: list[str]) -> None:
        commits.append(node_ids)

    r.subscribe(listener)
    calls = [
        r.create(world.tenant.id, world.pool_id, 2),
        r.create(world.tenant.id, "pool_unknown", 1),
        r.create(other.id, world.pool_id, 1),  # another tenant's pool
        r.create(world.tenant.id, world.pool_id, 2, spot=True),
        r.create(world.tenant.id, world.pool_id, 3),  # no on-demand node has 3 left after the first
        r.create(world.tenant.id, world.pool_id, 2),
        r.create(world.tenant.id, world.pool_id, 2, spot=True),  # quota: 2 + 2 + 2 + 2 > 7
        r.create(world.tenant.id, world.pool_id, 1, spot=True),
    ]
    results = await asyncio.gather(*calls, return_exceptions=True)
    outcome = [x.code if isinstance(x, ComputeError) else "ok" for x in results]
    assert outcome[1:3] == ["NOT_FOUND", "NOT_FOUND"]
    assert set(outcome) <= {"ok", "NOT_FOUND", "UNAVAILABLE", "CONFLICT"}
    if not world.db.is_postgres:  # one batch, placed in arrival order
        assert outcome == ["ok", "NOT_FOUND", "NOT_FOUND", "ok", "UNAVAILABLE", "ok", "CONFLICT", "ok"]
        # The first booker found the lock free; the seven that queued behind it shared one transaction.
        assert len(commits) == 2
    booked = [x for x in results if isinstance(x, Reservation)]
    assert {x.node_id for x in booked if not x.spot} <= {regular.id}
    assert {x.node_id for x in booked} <= {regular.id, spot.id}
    used = (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used
    assert sum(x.gpu_count for x in booked) == used <= 7
    held = Counter(d for x in booked for d in x.device_ids)
    assert max(held.values()) == 1
    assert len(await world.compute.reservations.list(world.tenant.id, state="active")) == len(booked)


async def test_a_taken_device_is_not_booked_again_and_a_release_gives_it_back(world: World) -> None:
    node = await world.node("n1", 2)
    made = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert made.node_id == node.id and len(made.device_ids) == 2
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert err.value.code == "UNAVAILABLE"
    await world.compute.reservations.release(world.tenant.id, made.id)
    assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 0
    assert len(await world.compute.reservations.list(world.tenant.id, state="active")) == 0


async def test_a_booker_cancelled_while_queued_books_nothing(sqlite_template: Path, tmp_path: Path) -> None:
    """SQLite only: the group-commit queue is how SQLite books concurrently."""
    shutil.copy(sqlite_template, tmp_path / "bc.db")
    db = Database(f"sqlite:///{tmp_path / 'bc.db'}")
    try:
        world = await make_world(db, SimClock())
        await world.node("n1", 8)
        create = world.compute.reservations.create
        tasks = [asyncio.create_task(create(world.tenant.id, world.pool_id, 1)) for _ in range(3)]
        for _ in range(3):
            await asyncio.sleep(0)
        tasks[1].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[1], asyncio.CancelledError)
        assert all(isinstance(x, Reservation) for x in (results[0], results[2]))
        assert len(await world.compute.reservations.list(world.tenant.id, state="active")) == 2
        assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 2
    finally:
        await db.dispose()
