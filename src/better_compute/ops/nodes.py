"""Nodes, per pool: whether bcd is connected, the node's state, its labels and GPUs."""

from __future__ import annotations

from better_compute.compute.models import Node
from better_compute.ops.pools import pool_named
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["list_nodes"]


def node_view(node: Node, pool_name: str) -> View:
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
        "gpus": sum(device.present for device in node.devices),
        "kubernetesNodeName": node.kubernetes_node_name,
    }


async def list_nodes(
    compute: Compute, tenant_id: str, *, pool: str | None = None, include_retired: bool = False
) -> list[View]:
    """The tenant's nodes, or one pool's (by name)."""
    pool_id = (await pool_named(compute, tenant_id, pool)).id if pool is not None else None
    names = {p.id: p.name for p in await compute.pools.list(tenant_id, include_archived=True)}
    nodes = await compute.nodes.list(tenant_id, pool_id=pool_id, include_retired=include_retired)
    return [node_view(node, names.get(node.pool_id, node.pool_id)) for node in nodes]
