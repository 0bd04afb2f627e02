"""The change hook: called after commit with the nodes whose assignments changed, never for a rollback."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import event

from better_compute.compute import SPOT_LABEL, set_system_label
from better_compute.compute.changes import mark_pools_changed
from better_compute.core.errors import ComputeError

from .conftest import World


async def test_bookings_and_releases_reach_subscribers_after_commit(world: World) -> None:
    node = await world.node("n1", 4)
    seen: list[tuple[list[str], tuple[str, ...]]] = []

    async def listener(node_ids: list[str]) -> None:
        # Runs after commit: a fresh read already sees the change.
        assignment = await world.compute.reservations.assignments(node_ids[0])
        seen.append((node_ids, tuple(h.reservation_id for h in assignment.reservations)))

    world.compute.reservations.subscribe(listener)
    reservation = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert seen == [([node.id], (reservation.id,))]
    assignment = await world.compute.reservations.assignments(node.id)
    assert assignment.reservations[0].device_uuids == ("GPU-n1-0", "GPU-n1-1")
    assert (assignment.cordoned, assignment.system_labels) == (False, {})
    await world.compute.reservations.release(world.tenant.id, reservation.id)
    assert seen[-1] == ([node.id], ())
    count = len(seen)
    await world.compute.reservations.release(world.tenant.id, reservation.id)  # nothing changed: no call
    with pytest.raises(ComputeError):
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 9)
    assert len(seen) == count


async def test_cordons_and_system_labels_reach_the_hook_and_the_assignment(world: World) -> None:
    node = await world.node("n1", 1)
    calls: list[list[str]] = []

    async def listener(node_ids: list[str]) -> None:
        calls.append(node_ids)

    unsubscribe = world.compute.reservations.subscribe(listener)
    await world.compute.nodes.cordon(world.tenant.id, node.id)
    async with world.compute.reservations.transaction() as session:
        await set_system_label(session, node.id, SPOT_LABEL, "spot")
    assert calls == [[node.id], [node.id]]
    assignment = await world.compute.reservations.assignments(node.id)
    assert assignment.cordoned and assignment.system_labels == {SPOT_LABEL: "spot"}
    with pytest.raises(RuntimeError):
        async with world.compute.reservations.transaction() as session:
            await set_system_label(session, node.id, SPOT_LABEL, None)
            raise RuntimeError("rolled back")
    assert len(calls) == 2
    unsubscribe()
    await world.compute.nodes.uncordon(world.tenant.id, node.id)
    assert len(calls) == 2


async def test_a_failing_listener_does_not_undo_the_booking(world: World, caplog: pytest.LogCaptureFixture) -> None:
    await world.node("n1", 1)

    async def broken(node_ids: list[str]) -> None:
        raise ValueError("listener down")

    world.compute.reservations.subscribe(broken)
    with caplog.at_level(logging.ERROR):
        reservation = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert (await world.compute.reservations.get(world.tenant.id, reservation.id)).state == "active"
    assert "listener" in caplog.text


async def test_a_listener_may_book_and_release_itself(world: World) -> None:
    """Listeners run outside the SQLite write lock, so one that writes does not deadlock."""
    await world.node("n1", 4)
    calls: list[list[str]] = []
    made: list[str] = []

    async def listener(node_ids: list[str]) -> None:
        calls.append(node_ids)
        if len(calls) == 1:  # after the first booking: book once more and release it, from inside the hook
            made.append((await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)).id)
            await world.compute.reservations.release(world.tenant.id, made[0])

    world.compute.reservations.subscribe(listener)
    async with asyncio.timeout(20):
        first = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert len(calls) == 3 and len(made) == 1
    active = {r.id for r in await world.compute.reservations.list(world.tenant.id, state="active")}
    assert active == {first.id}
    assert (await world.compute.reservations.get(world.tenant.id, made[0])).state == "released"


async def test_pool_changes_reach_pool_listeners_after_commit_and_never_node_listeners(world: World) -> None:
    """A module's pool report (a substrate's state) rides the same transaction; bcd's node listeners never see it."""
    node_calls: list[list[str]] = []
    pool_calls: list[list[str]] = []

    async def on_nodes(ids: list[str]) -> None:
        node_calls.append(ids)

    async def on_pools(ids: list[str]) -> None:
        pool_calls.append(ids)

    feed = world.compute.reservations.feed
    feed.subscribe(on_nodes)
    stop = feed.subscribe_pools(on_pools)
    async with feed.transaction() as session:
        mark_pools_changed(session, [world.pool_id, world.pool_id])
    assert (pool_calls, node_calls) == ([[world.pool_id]], [])
    with pytest.raises(RuntimeError):
        async with feed.transaction() as session:
            mark_pools_changed(session, [world.pool_id])
            raise RuntimeError("rolled back")
    assert len(pool_calls) == 1
    await world.node("n1", 1)
    await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)  # node changes only
    assert len(pool_calls) == 1 and node_calls != []
    stop()
    async with feed.transaction() as session:
        mark_pools_changed(session, [world.pool_id])
    assert len(pool_calls) == 1


async def test_an_assignment_is_read_in_one_statement(world: World) -> None:
    """bcd's assignment is read on every hello and push: the node and its held devices in one statement,
    two reservations' devices each, and a node that holds none still has its labels."""
    node = await world.node("n1", 4)
    first = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    second = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    idle = await world.node("n2", 1)
    await world.compute.nodes.cordon(world.tenant.id, idle.id)
    sent: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        sent.append(statement)

    engine = world.compute.reservations.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        busy = await world.compute.reservations.assignments(node.id)
        assert len(sent) == 1, sent
        free = await world.compute.reservations.assignments(idle.id)
        assert len(sent) == 2, sent
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert sorted((len(h.device_uuids), h.reservation_id) for h in busy.reservations) == [(1, second.id), (2, first.id)]
    assert set(busy.reservations[0].device_uuids) | set(busy.reservations[1].device_uuids) == {
        f"GPU-n1-{i}" for i in range(3)
    }
    assert (busy.cordoned, free.cordoned, free.reservations) == (False, True, ())
    with pytest.raises(ComputeError) as missing:
        await world.compute.reservations.assignments("node_missing")
    assert missing.value.code == "NOT_FOUND"
