"""Bookings, cordons, retires and transactions that overlap, with the interleaving forced.

Each test holds one transaction at an await it already has (see interleave) while
another runs as far as the database lets it, then lets the first go on. Before the
fixes these orders produced a booking on a retired node, a retired node brought back
as cordoned, a read that saw another's commit half-way through, and a group commit
that booked twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.util import await_only

from better_compute.compute import batch, compute_services, cordon, nodes, retire
from better_compute.compute.tables import DeviceRow, NodeRow, QuotaRow, ReservationRow
from better_compute.core.errors import ComputeError
from better_compute.store import Database

from .conftest import World
from .interleave import Pause, pause_before, waiting_or_done


async def _state(db: Database, node_id: str) -> str:
    async with db.session() as session:
        return str(await session.scalar(select(NodeRow.state).where(NodeRow.id == node_id)))


async def _active(db: Database) -> list[Any]:
    async with db.session() as session:
        query = select(ReservationRow.id, ReservationRow.node_id, ReservationRow.gpu_count)
        return list((await session.execute(query.where(ReservationRow.state == "active"))).all())


async def _quota_used(db: Database) -> int:
    async with db.session() as session:
        return int(await session.scalar(select(func.coalesce(func.sum(QuotaRow.used), 0))) or 0)


async def test_a_booking_in_flight_and_a_teardown_of_its_node_take_turns(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await world.node("n1", 4)
    pause = Pause()
    # The booking has read the node as ready and is about to take its devices.
    pause_before(monkeypatch, batch, "_apply", pause)
    booked = asyncio.create_task(world.compute.reservations.create(world.tenant.id, world.pool_id, 2))
    await asyncio.wait_for(pause.reached.wait(), 60)

    async def teardown() -> None:
        """What a substrate's teardown does: cordon, then retire once nothing is held."""
        async with world.compute.feed.transaction() as session:
            await cordon(session, node.id, world.clock.now(), reason="test")
        async with world.compute.feed.transaction() as session:
            await retire(session, node.id, world.clock.now(), reason="test")

    torn_down = asyncio.create_task(teardown())
    await waiting_or_done(world.db, torn_down)
    pause.release()
    results = await asyncio.gather(booked, torn_down, return_exceptions=True)

    active = await _active(world.db)
    state = await _state(world.db, node.id)
    assert not (state == "retired" and active), "an active reservation on a retired node"
    booked_first = not isinstance(results[0], BaseException)
    if booked_first:  # the retire saw the reservation and refused; the node stays cordoned, holding it
        assert results[0].node_id == node.id  # type: ignore[union-attr]
        assert isinstance(results[1], ComputeError) and results[1].code == "INVALID_STATE"
        assert state == "cordoned" and len(active) == 1
    else:  # the booking found the node cordoned once it could lock it, and nothing else had room
        assert isinstance(results[0], ComputeError) and results[0].reason == "no-capacity"
        assert results[1] is None and state == "retired" and not active
    assert await _quota_used(world.db) == sum(a.gpu_count for a in active)


async def test_a_cordon_and_a_retire_of_one_node_take_turns(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    node = await world.node("n1", 2)
    pause = Pause()
    original = nodes.node_row
    calls = 0

    async def read_then_pause(*args: Any, **kwargs: Any) -> Any:
        """The cordon has read the node (ready) and is about to write it."""
        nonlocal calls
        calls += 1
        row = await original(*args, **kwargs)
        if calls == 1:
            await pause()
        return row

    monkeypatch.setattr(nodes, "node_row", read_then_pause)

    async def cordon_it() -> None:
        async with world.compute.feed.transaction() as session:
            await cordon(session, node.id, world.clock.now(), reason="test")

    async def retire_it() -> None:
        async with world.compute.feed.transaction() as session:
            await retire(session, node.id, world.clock.now(), reason="test")

    cordoned = asyncio.create_task(cordon_it())
    await asyncio.wait_for(pause.reached.wait(), 60)
    retired = asyncio.create_task(retire_it())
    await waiting_or_done(world.db, retired)
    pause.release()
    await asyncio.gather(cordoned, retired)
    assert await _state(world.db, node.id) == "retired"  # retired is terminal: the cordon came first


async def test_a_read_inside_a_transaction_does_not_see_another_commit_half_way(tmp_path: Any) -> None:
    """SQLite: the transaction's reads are in it (BEGIN IMMEDIATE), not in autocommit before it."""
    db = Database(f"sqlite:///{tmp_path}/reads.db")
    async with db.transaction() as session:
        await session.execute(text("CREATE TABLE counter (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)"))
        await session.execute(text("INSERT INTO counter VALUES (1, 1)"))

    async def write() -> None:
        async with db.transaction() as session:
            await session.execute(text("UPDATE counter SET v = 2 WHERE id = 1"))

    try:
        async with db.transaction() as session:
            first = await session.scalar(text("SELECT v FROM counter WHERE id = 1"))
            writer = asyncio.create_task(write())
            await waiting_or_done(db, writer)
            second = await session.scalar(text("SELECT v FROM counter WHERE id = 1"))
            await session.execute(text("UPDATE counter SET v = v + 10 WHERE id = 1"))
        await writer
        async with db.session() as session:
            final = await session.scalar(text("SELECT v FROM counter WHERE id = 1"))
    finally:
        await db.dispose()
    assert (first, second) == (1, 1)
    assert final == 2  # the other transaction ran after ours, whole


async def test_a_cancelled_group_commit_leader_books_each_request_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancel the leader of a batch while its COMMIT is in flight: its followers keep their one booking.

    On PostgreSQL a batch's write is one call outside a transaction (see batch), which has
    taken effect once it returns: the pause is after that call.
    """
    await world.node("n1", 8)
    pause = Pause()
    commits = 0
    if world.db.is_postgres:
        real_write = batch._apply_in_one_call

        async def write_then_pause(*args: Any) -> None:
            nonlocal commits
            await real_write(*args)
            commits += 1
            if commits == 2:  # the second batch: a leader with a follower
                await pause()

        monkeypatch.setattr(batch, "_apply_in_one_call", write_then_pause)
    else:
        dialect = world.db.engine.sync_engine.dialect
        real_commit = dialect.do_commit

        def commit_then_pause(dbapi_connection: Any) -> None:
            nonlocal commits
            real_commit(dbapi_connection)
            commits += 1
            if commits == 2:
                await_only(pause())

        monkeypatch.setattr(dialect, "do_commit", commit_then_pause)
    r = world.compute.reservations
    calls = [asyncio.create_task(r.create(world.tenant.id, world.pool_id, 1)) for _ in range(3)]
    await asyncio.wait_for(pause.reached.wait(), 60)
    calls[1].cancel()  # the first booker's batch was its own; the second leads the second and the third
    await asyncio.sleep(0)
    pause.release()
    results = await asyncio.gather(*calls, return_exceptions=True)

    assert isinstance(results[1], asyncio.CancelledError)
    given = {x.id for x in results if not isinstance(x, BaseException)}
    assert len(given) == 2
    active = await _active(world.db)
    # Three calls, three bookings: the cancelled leader's stands (its COMMIT went through) and none twice.
    assert len(active) == 3 and given <= {a.id for a in active}
    assert await _quota_used(world.db) == 3
    async with world.db.session() as session:
        holders = Counter(
            (await session.scalars(select(DeviceRow.reservation_id).where(DeviceRow.reservation_id.is_not(None)))).all()
        )
    assert set(holders) == {a.id for a in active} and set(holders.values()) == {1}


async def test_a_batch_placed_on_a_stale_quota_read_is_caught_by_the_guarded_charge(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another replica books the last of the quota between this batch's read and its charge."""
    await world.node("n1", 8)
    await world.compute.quotas.set(world.tenant.id, "H100", 2)
    other = Database(world.db.url)
    try:
        replica = compute_services(other, world.clock)
        pause = Pause()
        pause_before(monkeypatch, batch, "_apply", pause)  # placed on used = 0, about to claim
        first = asyncio.create_task(world.compute.reservations.create(world.tenant.id, world.pool_id, 2))
        await asyncio.wait_for(pause.reached.wait(), 60)
        second = asyncio.create_task(replica.reservations.create(world.tenant.id, world.pool_id, 2))
        await waiting_or_done(other, second)
        pause.release()
        results = await asyncio.gather(first, second, return_exceptions=True)
    finally:
        await other.dispose()
    refused = [x for x in results if isinstance(x, ComputeError)]
    assert len(refused) == 1 and refused[0].reason == "quota-exceeded"
    assert await _quota_used(world.db) == 2 == sum(a.gpu_count for a in await _active(world.db))
