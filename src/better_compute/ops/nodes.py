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
    """A row of compute.listing.node_rows as the API answers it (unpacked by position, as pool_view)."""
    id_, name, pool_id, pool_name, state, connected, last_seen_at, labels, system_labels, gpus, os_section = row
    return {
        "id": id_,
        "name": name,
        "pool": pool_name if pool_name is not None else pool_id,
        "poolId": pool_id,
        "state": state,
        "connected": connected,
        "lastSeenAt": iso(last_seen_at),
        "labels": labels,
        "systemLabels": system_labels,
        "gpus": int(gpus),
        "kubernetesNodeName": kubernetes_node_name(os_section),
    }


async def list_nodes(
    compute: Compute, tenant_id: str, *, pool: str | None = None, include_retired: bool = False
) -> list[View]:
    """The tenant's nodes, or one pool's (by name): one read session, one statement (two, in one snapshot, with a pool)."""
    async with compute.db.session() if pool is not None else compute.db.read() as session:
        pool_id = await pool_id_named(session, tenant_id, pool) if pool is not None else None
        rows = await node_rows(session, tenant_id=tenant_id, pool_id=pool_id, include_retired=include_retired)
    return [node_view(row) for row in rows]
