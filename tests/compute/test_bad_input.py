"""Bad input gets a ComputeError with a clear message and a path, and changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from better_compute.compute.tables import DeviceRow, NodeRow, PoolRow, QuotaRow, ReservationRow, SiteRow
from better_compute.core.errors import ComputeError

from .conftest import World

TABLES = (SiteRow, PoolRow, NodeRow, DeviceRow, ReservationRow, QuotaRow)


async def _counts(world: World) -> dict[str, int]:
    async with world.db.session() as session:
        return {t.__tablename__: int(await session.scalar(select(func.count()).select_from(t)) or 0) for t in TABLES}


async def _quota_used(world: World) -> int:
    return sum(u.used for u in await world.compute.quotas.usage(world.tenant.id))


def _cases(world: World) -> list[tuple[Callable[[], Awaitable[Any]], str, str, str]]:
    c = world.compute
    t, pool, site = world.tenant.id, world.pool_id, world.site_id
    return [
        (lambda: c.sites.create("ten_unknown", "s2", "shared"), "NOT_FOUND", "/tenantId", "no tenant"),
        (lambda: c.pools.create("ten_unknown", "p2", site, "metal-host"), "NOT_FOUND", "/tenantId", "no tenant"),
        (lambda: c.quotas.set("ten_unknown", "H100", 3), "NOT_FOUND", "/tenantId", "no tenant"),
        (lambda: c.quotas.set(t, "H100", -1), "INVALID_INPUT", "/limit", "0 or more"),
        (lambda: c.reservations.create(t, "pool_unknown", 1), "NOT_FOUND", "/poolId", "no pool"),
        (lambda: c.reservations.create("ten_unknown", pool, 1), "NOT_FOUND", "/poolId", "no pool"),
        (lambda: c.reservations.create(t, pool, 0), "INVALID_INPUT", "/gpuCount", "whole number"),
        (lambda: c.reservations.create(t, pool, -2), "INVALID_INPUT", "/gpuCount", "whole number"),
        (lambda: c.reservations.create(t, pool, 1, binding="vm"), "INVALID_INPUT", "/binding", "one of"),
        (lambda: c.reservations.create(t, pool, 1, spot="yes"), "INVALID_INPUT", "/spot", "true or false"),  # type: ignore[arg-type]
        (lambda: c.reservations.release(t, "res_unknown"), "NOT_FOUND", "/reservationId", "no reservation"),
        (
            lambda: c.reservations.end("res_unknown", "released", reason="test"),
            "NOT_FOUND",
            "/reservationId",
            "no reservation",
        ),
        (lambda: c.reservations.end("res_unknown", "deleted", reason="test"), "INVALID_INPUT", "/state", "released"),
        (lambda: c.pools.create(t, "Bad Name", site, "metal-host"), "INVALID_INPUT", "/name", "lowercase"),
        (lambda: c.pools.create(t, "p2", site, "metal-host", policy=[]), "INVALID_INPUT", "/policy", "object"),  # type: ignore[arg-type]
        (lambda: c.pools.create(t, "p2", "site_unknown", "metal-host"), "NOT_FOUND", "/siteId", "no site"),
        (lambda: c.pools.archive(t, "pool_unknown"), "NOT_FOUND", "/poolId", "no pool"),
        (lambda: c.sites.create(t, "s2", ""), "INVALID_INPUT", "/kind", "non-empty"),
    ]


async def test_bad_input_is_refused_with_a_path_and_changes_nothing(world: World) -> None:
    await world.node("n1", 4)
    await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    before, used = await _counts(world), await _quota_used(world)
    for call, code, path, words in _cases(world):
        with pytest.raises(ComputeError) as err:
            await call()
        assert (err.value.code, err.value.path) == (code, path), err.value
        assert words in err.value.message
        assert await _counts(world) == before
        assert await _quota_used(world) == used


async def test_a_booking_refused_for_capacity_changes_nothing(world: World) -> None:
    await world.node("n1", 2)
    before = await _counts(world)
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 3)
    assert (err.value.code, err.value.path, err.value.reason) == ("UNAVAILABLE", "/gpuCount", "no-capacity")
    assert "gpu-fleet" in err.value.message
    assert await _counts(world) == before
