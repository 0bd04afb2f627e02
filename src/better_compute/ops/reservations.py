"""Reservations: book GPUs in a pool (by name), list them, release them.

A reservation's `health` is `degraded` while bcd reports one of its GPUs unhealthy; `degradedGpus` names
each (uuid, index, reason, XID). Its `state` stays `active`: the tenant keeps its other GPUs. One
reservation (`get_reservation`) also lists its GPUs with each one's health (ops.health).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.booking import check_request
from better_compute.compute.listing import Raw, listed_reservation, reservation_rows
from better_compute.compute.models import Reservation
from better_compute.core.ids import new_id
from better_compute.ops.health import device_view
from better_compute.ops.idempotency import claim
from better_compute.ops.list_answers import ListAnswers
from better_compute.ops.pools import pool_id_named, pool_named
from better_compute.ops.views import RowViews, View, iso
from better_compute.server import Compute

__all__ = [
    "create_reservation",
    "get_reservation",
    "list_reservations",
    "list_reservations_json",
    "release_reservation",
]


def reservation_view(reservation: Reservation, pool_name: str) -> View:
    return {
        "id": reservation.id,
        "pool": pool_name,
        "poolId": reservation.pool_id,
        "nodeId": reservation.node_id,
        "gpuModel": reservation.gpu_model,
        "gpuCount": reservation.gpu_count,
        "binding": reservation.binding,
        "spot": reservation.spot,
        "state": reservation.state,
        "health": reservation.health,
        "degradedGpus": [
            {"uuid": g.uuid, "index": g.index, "reason": g.reason, "xid": g.xid} for g in reservation.degraded_gpus
        ],
        "createdAt": iso(reservation.created_at),
        "endedAt": iso(reservation.ended_at),
    }


def _listed_view(row: Any, raw: Raw) -> View:
    return reservation_view(listed_reservation(row, raw), row.pool_name if row.pool_name is not None else row.pool_id)


RESERVATIONS = RowViews(_listed_view)


async def _pool_names(compute: Compute, tenant_id: str) -> dict[str, str]:
    return {p.id: p.name for p in await compute.pools.list(tenant_id, include_archived=True)}


async def create_reservation(
    compute: Compute,
    tenant_id: str,
    *,
    pool: str,
    gpus: int,
    spot: bool = False,
    idempotency_key: str | None = None,
) -> View:
    """Book; with `idempotency_key`, a retry of the same request answers the booking it made (ops.idempotency)."""
    found = await pool_named(compute, tenant_id, pool)
    reservation_id = None
    if idempotency_key is not None:
        check_request(gpus, "kubernetes", spot)  # a refused request records nothing: its key stays free
        params = {"pool": pool, "gpus": gpus, "spot": spot}
        reservation_id = await claim(
            compute, tenant_id, "reservations.create", idempotency_key, params, lambda: new_id("res")
        )
    reservation = await compute.reservations.create(tenant_id, found.id, gpus, spot=spot, reservation_id=reservation_id)
    return reservation_view(reservation, found.name)


async def list_reservations(
    compute: Compute, tenant_id: str, *, pool: str | None = None, state: str | None = None
) -> list[View]:
    """One read session, one statement (two, in one snapshot, with a pool): the reservations with their pools' names."""
    rows, raw = await _read(compute, tenant_id, pool, state)
    return RESERVATIONS.views(rows, raw)


async def list_reservations_json(
    compute: Compute, tenant_id: str, *, pool: str | None = None, state: str | None = None
) -> bytes:
    """list_reservations as the API's JSON array, kept until the tenant's lists change (ops.list_answers)."""

    async def encode(session: AsyncSession) -> bytes:
        return RESERVATIONS.json(await _rows(session, tenant_id, pool, state), Raw.of(session))

    query = ("reservations", pool, state)
    return await ListAnswers.of(compute.db).answer(tenant_id, query, encode, snapshot=pool is not None)


async def _read(compute: Compute, tenant_id: str, pool: str | None, state: str | None) -> tuple[Sequence[Any], Raw]:
    async with compute.db.session() if pool is not None else compute.db.read() as session:
        rows = await _rows(session, tenant_id, pool, state)
    return rows, Raw.of(session)


async def _rows(session: AsyncSession, tenant_id: str, pool: str | None, state: str | None) -> Sequence[Any]:
    pool_id = await pool_id_named(session, tenant_id, pool) if pool is not None else None
    return await reservation_rows(session, tenant_id=tenant_id, pool_id=pool_id, state=state)


async def get_reservation(compute: Compute, tenant_id: str, reservation_id: str) -> View:
    """The reservation as the list shows it, and `devices`: the GPUs it was given, each with its health now."""
    reservation = await compute.reservations.get(tenant_id, reservation_id)
    node = await compute.nodes.get(tenant_id, reservation.node_id)
    pool = await compute.pools.get(tenant_id, reservation.pool_id)
    held = set(reservation.device_ids)
    return {
        **reservation_view(reservation, pool.name),
        "devices": [device_view(d) for d in node.devices if d.id in held],
    }


async def release_reservation(compute: Compute, tenant_id: str, reservation_id: str) -> View:
    released = await compute.reservations.release(tenant_id, reservation_id)
    names = await _pool_names(compute, tenant_id)
    return reservation_view(released, names.get(released.pool_id, released.pool_id))
