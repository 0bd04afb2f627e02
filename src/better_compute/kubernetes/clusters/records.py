"""Cluster and node-pool rows: written as intent before any provider call, read by both reconcilers.

A substrate's cluster row is made once per pool (`substrate_pool_id`), with one node-pool
row per flavor. Later document changes update the node pools' sizes and shapes in place
(the clusters reconciler finds out whether the provider can follow), mark removed flavors
for deletion, and never touch the cluster's identity (FleetConfig blocks that). A fixed
flavor's lower count is the exception: it is recorded by the substrate's shrink step once
the machines it picked are removed (`held_back`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.kubernetes.desired import DesiredSubstrate, NodeShape
from better_compute.kubernetes.provider import Autoscaling, NodePoolSpec
from better_compute.kubernetes.tables import ClusterRow, NodePoolRow

__all__ = [
    "ClusterRecord",
    "NodePoolRecord",
    "cluster_of",
    "cluster_row",
    "held_back",
    "node_pool_rows",
    "pool_cluster",
    "record_desired",
]

LIVE = ("pending", "provisioning", "ready", "updating", "error", "deleting")


@dataclass(frozen=True, slots=True)
class NodePoolRecord:
    id: str
    flavor: str
    name: str
    node_count: int
    autoscaling: Autoscaling | None
    shape: NodeShape
    status: str
    message: str | None

    @property
    def spot(self) -> bool:
        return self.shape.spot

    @property
    def machine_type(self) -> str:
        return self.shape.machine_type

    def spec(self) -> NodePoolSpec:
        """The node pool the provider is asked for."""
        return self.shape.spec(self.name, self.node_count, self.autoscaling)


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """What `compute.kubernetes_clusters` hands out: never a credential."""

    id: str
    tenant_id: str
    account: str
    provider: str
    mode: str
    name: str
    location: str
    provider_cluster_id: str | None
    global_id: str | None
    substrate_pool_id: str | None
    status: str
    message: str | None
    endpoint: str | None
    version: str | None
    upgrading_to: str | None
    node_pools: tuple[NodePoolRecord, ...]
    created_at: datetime
    updated_at: datetime


def _scaling(row: NodePoolRow) -> Autoscaling | None:
    if row.min_nodes is None or row.max_nodes is None:
        return None
    return Autoscaling(row.min_nodes, row.max_nodes)


def node_pool_of(row: NodePoolRow) -> NodePoolRecord:
    return NodePoolRecord(
        id=row.id,
        flavor=row.flavor,
        name=row.name,
        node_count=row.node_count,
        autoscaling=_scaling(row),
        shape=NodeShape.stored(row.shape),
        status=row.status,
        message=row.message,
    )


def cluster_of(row: ClusterRow, pools: list[NodePoolRow]) -> ClusterRecord:
    return ClusterRecord(
        id=row.id,
        tenant_id=row.tenant_id,
        account=row.account,
        provider=row.provider,
        mode=row.mode,
        name=row.name,
        location=row.location,
        provider_cluster_id=row.provider_cluster_id,
        global_id=row.global_id,
        substrate_pool_id=row.substrate_pool_id,
        status=row.status,
        message=row.message,
        endpoint=row.endpoint,
        version=row.version,
        upgrading_to=str(row.upgrade["to"]) if row.upgrade else None,
        node_pools=tuple(node_pool_of(p) for p in pools if not p.delete_requested),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def cluster_row(session: AsyncSession, cluster_id: str, *, tenant_id: str | None = None) -> ClusterRow:
    row = await session.get(ClusterRow, cluster_id) if isinstance(cluster_id, str) else None
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise ComputeError(ErrorCode.NOT_FOUND, f"no cluster {cluster_id!r}", "/clusterId")
    return row


async def node_pool_rows(session: AsyncSession, cluster_id: str) -> list[NodePoolRow]:
    rows = await session.scalars(
        select(NodePoolRow).where(NodePoolRow.cluster_id == cluster_id).order_by(NodePoolRow.name)
    )
    return list(rows)


async def pool_cluster(session: AsyncSession, pool_id: str) -> ClusterRow | None:
    """The live (not deleted) cluster of a pool's substrate, if one is recorded."""
    return await session.scalar(
        select(ClusterRow)
        .where(ClusterRow.substrate_pool_id == pool_id, ClusterRow.status.in_(LIVE))
        .order_by(ClusterRow.created_at.desc())
    )


def _refuse_another_identity(row: ClusterRow, desired: DesiredSubstrate) -> None:
    """A cluster row is reused only for the cluster it records, and never once its delete was asked
    for: CONFLICT (the substrate says so and retries) until that cluster is gone."""
    if row.delete_requested:
        raise ComputeError(
            ErrorCode.CONFLICT,
            f"the pool's previous cluster {row.name} is still being deleted: the substrate is made anew once it is gone",
        )
    spec = desired.cluster
    same = (row.account, row.mode) == (desired.account, desired.mode) and (
        (row.location, row.private_nodes) == (spec.location, spec.private_nodes)
        if spec is not None
        else row.name == str(desired.adopt_id)
    )
    if not same:
        raise ComputeError(
            ErrorCode.CONFLICT,
            f"the pool's cluster {row.name} is another cluster than policy.substrate names; "
            "its account and place never change in place",
        )


async def _refuse_a_second_adopter(
    session: AsyncSession, tenant_id: str, pool_id: str, account: str, adopt_id: str
) -> None:
    """One cluster backs one pool: CONFLICT when another live substrate names the same account and cluster id."""
    other = await session.scalar(
        select(ClusterRow.substrate_pool_id).where(
            ClusterRow.tenant_id == tenant_id,
            ClusterRow.account == account,
            ClusterRow.provider_cluster_id == adopt_id,
            ClusterRow.status.in_(LIVE),
            ClusterRow.substrate_pool_id != pool_id,
        )
    )
    if other is not None:
        raise ComputeError(
            ErrorCode.CONFLICT,
            f"cluster {adopt_id} of account {account} already backs pool {other}: one cluster backs one pool. "
            "To move it, archive that pool and wait for its substrate to be deleted",
            "/policy/substrate/cluster/adopt",
        )


def held_back(pool: NodePoolRow, node_count: int, autoscaling: Autoscaling | None) -> bool:
    """Whether a fixed flavor asks for fewer Nodes than its row records: the row keeps its count
    until the substrate has removed the Nodes it picked (shrink_step.py), so the provider is
    never asked to lower the count itself and remove whichever machines it likes."""
    return autoscaling is None and pool.min_nodes is None and node_count < pool.node_count


async def record_desired(
    session: AsyncSession, *, now: datetime, tenant_id: str, pool_id: str, provider: str, desired: DesiredSubstrate
) -> tuple[ClusterRow, bool]:
    """Make the pool's cluster and node-pool rows say what `desired` asks; returns the row and
    whether anything changed (the clusters reconciler then has work)."""
    row = await pool_cluster(session, pool_id)
    changed = False
    if row is not None:
        _refuse_another_identity(row, desired)
    if row is None and desired.adopt_id is not None:
        await _refuse_a_second_adopter(session, tenant_id, pool_id, desired.account, desired.adopt_id)
    if row is None:
        spec = desired.cluster
        row = ClusterRow(
            id=new_id("kcl"),
            tenant_id=tenant_id,
            account=desired.account,
            provider=provider,
            mode=desired.mode,
            name=spec.name if spec else str(desired.adopt_id),
            location=spec.location if spec else "",
            private_nodes=spec.private_nodes if spec else False,
            substrate_pool_id=pool_id,
            provider_cluster_id=None if spec else desired.adopt_id,
            global_id=None,
            status="pending",
            message=None,
            endpoint=None,
            version=None,
            upgrade=None,
            delete_requested=False,
            next_attempt_at=None,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        await session.flush()
        changed = True
    existing = {p.name: p for p in await node_pool_rows(session, row.id)}
    wanted = set()
    for flavor in desired.flavors:
        pool_spec = flavor.spec
        wanted.add(pool_spec.name)
        scaling = pool_spec.autoscaling
        values = (
            NodeShape.of(pool_spec).to_json(),
            pool_spec.node_count,
            scaling.min_nodes if scaling else None,
            scaling.max_nodes if scaling else None,
        )
        pool = existing.get(pool_spec.name)
        if pool is not None and held_back(pool, pool_spec.node_count, scaling):
            values = (values[0], pool.node_count, None, None)
        if pool is None:
            session.add(
                NodePoolRow(
                    id=new_id("knp"),
                    cluster_id=row.id,
                    flavor=flavor.flavor,
                    name=pool_spec.name,
                    shape=values[0],
                    node_count=values[1],
                    min_nodes=values[2],
                    max_nodes=values[3],
                    status="pending",
                    message=None,
                    delete_requested=False,
                    created_at=now,
                    updated_at=now,
                )
            )
            changed = True
        elif (pool.shape, pool.node_count, pool.min_nodes, pool.max_nodes) != values or pool.delete_requested:
            pool.shape, pool.node_count, pool.min_nodes, pool.max_nodes = values
            pool.delete_requested, pool.updated_at = False, now
            changed = True
    for name, pool in existing.items():
        if name not in wanted and not pool.delete_requested:
            pool.delete_requested, pool.updated_at = True, now
            changed = True
    await session.flush()
    return row, changed
