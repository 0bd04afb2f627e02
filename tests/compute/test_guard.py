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
from better_compute.compute.booking import DEV, NODE
from better_compute.compute.tables import DeviceRow
from better_compute.core.errors import ComputeError

from .conftest import World


def _lying_free_count() -> Any:
    """Every device of a node counted as free, taken or not."""
    return select(func.count()).select_from(DEV).where(DEV.c.node_id == NODE.c.id).scalar_subquery()


async def _holders(world: World) -> dict[str, str | None]:
    async with world.db.session() as session:
        return {d.uuid: d.reservation_id for d in await session.scalars(select(DeviceRow))}


async def test_a_stale_read_cannot_claim_a_held_device_and_the_service_gives_up_rather_than_double_book(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.node("n1", 1)
    held = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    before = await _holders(world)
    monkeypatch.setattr(batch, "_free_count", _lying_free_count)

    async def held_as_free(session: Any, node_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
        return {held.node_id: [(d, "GPU-n1-0") for d in held.device_ids]}

    monkeypatch.setattr(batch, "_free_devices", held_as_free)
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert err.value.code == "UNAVAILABLE" and "concurrent" in err.value.message
    assert [r.id for r in await world.compute.reservations.list(world.tenant.id, state="active")] == [held.id]
    assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 1
    assert await _holders(world) == before
