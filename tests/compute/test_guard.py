"""The database guarantee holds even when the reads before it are stale.

Booking reads which devices are free, then claims them with `UPDATE ... WHERE
reservation_id IS NULL`. Here the reads are made to lie (as a lost lock or a stale
snapshot would), and the claim must still refuse a device that has a holder.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

import better_compute.compute.batch as batch
import better_compute.compute.booking as booking
from better_compute.compute import book
from better_compute.compute.booking import DEV, NODE, Contended
from better_compute.compute.tables import DeviceRow
from better_compute.core.errors import ComputeError

from .conftest import World


def _lying_free_count() -> Any:
    """Every device of a node counted as free, taken or not."""
    return select(func.count()).select_from(DEV).where(DEV.c.node_id == NODE.c.id).scalar_subquery()


async def _holders(world: World) -> dict[str, str | None]:
    async with world.db.session() as session:
        return {d.uuid: d.reservation_id for d in await session.scalars(select(DeviceRow))}


async def test_a_stale_read_cannot_claim_a_held_device(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    await world.node("n1", 2)
    held = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    before = await _holders(world)

    async def every_device(session: Any, node_id: str, gpu_count: int) -> list[str]:
        return list(held.device_ids)[:gpu_count]

    async def every_node(session: Any, pool_id: str, gpu_count: int, spot: bool) -> list[booking.Candidate]:
        return [booking.Candidate(held.node_id, "n1", False, True, 2)]

    monkeypatch.setattr(booking, "_lock_free_devices", every_device)
    monkeypatch.setattr(booking, "_candidates", every_node)
    with pytest.raises(Contended):
        async with world.db.transaction() as session:
            await book(session, now=world.clock.now(), tenant_id=world.tenant.id, pool_id=world.pool_id, gpu_count=1)
    assert await _holders(world) == before


async def test_the_service_gives_up_rather_than_double_book(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    await world.node("n1", 1)
    held = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)

    async def every_device(session: Any, node_id: str, gpu_count: int) -> list[str]:
        return list(held.device_ids)

    async def every_node(session: Any, pool_id: str, gpu_count: int, spot: bool) -> list[booking.Candidate]:
        return [booking.Candidate(held.node_id, "n1", False, True, 1)]

    monkeypatch.setattr(booking, "_lock_free_devices", every_device)
    monkeypatch.setattr(booking, "_candidates", every_node)
    monkeypatch.setattr(batch, "_free_count", _lying_free_count)

    async def held_as_free(session: Any, node_ids: list[str]) -> dict[str, list[str]]:
        return {held.node_id: list(held.device_ids)}

    monkeypatch.setattr(batch, "_free_devices", held_as_free)
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert err.value.code == "UNAVAILABLE" and "concurrent" in err.value.message
    assert [r.id for r in await world.compute.reservations.list(world.tenant.id, state="active")] == [held.id]
    assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 1
