"""Nodes, per pool: whether bcd is connected, the node's state, its labels and GPUs."""

from __future__ import annotations

from typing import Any

from better_compute.compute.listing import node_rows
from better_compute.compute.models import kubernetes_node_name
from better_compute.ops.pools import pool_id_named
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["list_nodes"]


def node_view(row: Any) -> View:
    """A row of compute.listing.node_rows as the API answers it."""
    return {
        "id": row.id,
        "name": row.name,
        "pool": row.pool_name if row.pool_name is not None else row.pool_id,
        "poolId": row.pool_id,
        "state": row.state,
        "connected": row.connected,
        "lastSeenAt": iso(row.last_seen_at),
        "labels": row.labels,
        "systemLabels": row.system_labels,
        "gpus": int(row.gpus),
        "kubernetesNodeName": kubernetes_node_name(row.os),
    }


async def list_nodes(
    compute: Compute, tenant_id: str, *, pool: str | None = None, include_retired: bool = False
) -> list[View]:
    """The tenant's nodes, or one pool's (by name): one read session, one statement (two with a pool)."""
    async with compute.db.session() as session:
        pool_id = await pool_id_named(session, tenant_id, pool) if pool is not None else None
        rows = await node_rows(session, tenant_id=tenant_id, pool_id=pool_id, include_retired=include_retired)
    return [node_view(row) for row in rows]
