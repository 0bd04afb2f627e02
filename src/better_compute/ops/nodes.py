"""Nodes, per pool: whether bcd is connected, the node's state, its labels and GPUs; one node with each
GPU and its health (`get_node`, ops.health)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.listing import Raw, node_rows
from better_compute.compute.models import Node, kubernetes_node_name
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.ops.health import device_view
from better_compute.ops.list_answers import ListAnswers
from better_compute.ops.pools import pool_id_named
from better_compute.ops.views import RowViews, View, iso
from better_compute.server import Compute

__all__ = ["get_node", "list_nodes", "list_nodes_json"]


def node_view(row: Any, raw: Raw) -> View:
    """A row of compute.listing.node_rows as the API answers it (unpacked by position, as pool_view)."""
    id_, name, pool_id, pool_name, state, connected, last_seen_at, labels, system_labels, gpus, os_section = row
    return {
        "id": id_,
        "name": name,
        "pool": pool_name if pool_name is not None else pool_id,
        "poolId": pool_id,
        "state": state,
        "connected": connected,
        "lastSeenAt": iso(raw.moment(last_seen_at)),
        "labels": raw.json(labels),
        "systemLabels": raw.json(system_labels),
        "gpus": int(gpus),
        "kubernetesNodeName": kubernetes_node_name(raw.json(os_section)),
    }


NODES = RowViews(node_view)


def node_detail_view(node: Node, pool_name: str) -> View:
    """A node as the list shows it, and `devices`: each GPU (ops.health.device_view) in index order."""
    return {
        "id": node.id,
        "name": node.name,
        "pool": pool_name,
        "poolId": node.pool_id,
        "state": node.state,
        "connected": node.connected,
        "lastSeenAt": iso(node.last_seen_at),
        "labels": node.labels,
        "systemLabels": node.system_labels,
        "gpus": sum(d.present for d in node.devices),
        "kubernetesNodeName": node.kubernetes_node_name,
        "devices": [device_view(d) for d in node.devices],
    }


async def get_node(compute: Compute, tenant_id: str, node: str) -> View:
    """One of the tenant's nodes by its id, else by its name or Kubernetes Node name among the live ones."""
    try:
        found = await compute.nodes.get(tenant_id, node)
    except ComputeError as exc:
        if exc.code is not ErrorCode.NOT_FOUND:
            raise
        named = [n for n in await compute.nodes.list(tenant_id) if node in (n.name, n.kubernetes_node_name)]
        if not named:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node!r}", "/node") from None
        if len(named) > 1:
            ids = ", ".join(n.id for n in named)
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"{len(named)} nodes are named {node!r}: use an id ({ids})", "/node"
            ) from None
        found = named[0]
    pool = await compute.pools.get(tenant_id, found.pool_id)
    return node_detail_view(found, pool.name)


async def list_nodes(
    compute: Compute, tenant_id: str, *, pool: str | None = None, include_retired: bool = False
) -> list[View]:
    """The tenant's nodes, or one pool's (by name): one read session, one statement (two, in one snapshot, with a pool)."""
    rows, raw = await _read(compute, tenant_id, pool, include_retired)
    return NODES.views(rows, raw)


async def list_nodes_json(
    compute: Compute, tenant_id: str, *, pool: str | None = None, include_retired: bool = False
) -> bytes:
    """list_nodes as the API's JSON array, kept until the tenant's lists change (ops.list_answers)."""

    async def encode(session: AsyncSession) -> bytes:
        return NODES.json(await _rows(session, tenant_id, pool, include_retired), Raw.of(session))

    query = ("nodes", pool, include_retired)
    return await ListAnswers.of(compute.db).answer(tenant_id, query, encode, snapshot=pool is not None)


async def _read(compute: Compute, tenant_id: str, pool: str | None, include_retired: bool) -> tuple[Sequence[Any], Raw]:
    async with compute.db.session() if pool is not None else compute.db.read() as session:
        rows = await _rows(session, tenant_id, pool, include_retired)
    return rows, Raw.of(session)


async def _rows(session: AsyncSession, tenant_id: str, pool: str | None, include_retired: bool) -> Sequence[Any]:
    pool_id = await pool_id_named(session, tenant_id, pool) if pool is not None else None
    return await node_rows(session, tenant_id=tenant_id, pool_id=pool_id, include_retired=include_retired)
