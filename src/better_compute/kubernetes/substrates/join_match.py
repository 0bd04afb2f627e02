"""Matching a joining node to its Node at join, so that it is born spot exactly when its Node is.

The substrate's run lists its Nodes (nodes_step), but a Node can come up after the
run's last look: the provider's autoscaler adds one, a node pool grows. Its bcd may
join before the next run lists it. At join the substrate reaches the cluster anyway
(the identity check's TokenReview), so it reads that Node there too and records it as
listed, with the spot-ness its node pool's label names; the admission hook then gives
`bc.dev/capacity=spot` to a Spot Node only, before its first booking, and never to an
on-demand one. A Node that cannot be read (gone, not ours, the read refused) is left
for the run to match: admission then takes it to be spot until matched, the safe side.
"""

from __future__ import annotations

import logging
from datetime import datetime

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node as KubeNode
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from better_compute.kubernetes.names import CAPACITY_LABEL, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.tables import SubstrateNodeRow
from better_compute.store import Database

__all__ = ["node_capacity", "record_joining_node"]

log = logging.getLogger(__name__)


async def node_capacity(client: AsyncClient, pool_id: str, node_name: str) -> bool | None:
    """Whether the Node `node_name` of the pool is a Spot one; None when it cannot be told."""
    try:
        node = await client.get(KubeNode, node_name)
    except ApiError as exc:
        log.info("pool %s: Node %s not read at join (%s); matched by the next run", pool_id, node_name, exc.status.code)
        return None
    labels = (node.metadata.labels if node.metadata else None) or {}
    if labels.get(SUBSTRATE_POOL_LABEL) != pool_id:
        return None
    return labels.get(CAPACITY_LABEL) == "spot"


async def record_joining_node(db: Database, *, pool_id: str, node_name: str, spot: bool, now: datetime) -> None:
    """Record the Node as listed unless a run has already (whose record stands)."""
    async with db.transaction() as session:
        insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
        await session.execute(
            insert(SubstrateNodeRow)
            .values(pool_id=pool_id, name=node_name, spot=spot, first_seen_at=now)
            .on_conflict_do_nothing()
        )
