"""`compute.kubernetes_substrates`: the state read. Never a token, never a credential.

view = await compute.kubernetes_substrates.get(tenant_id=..., pool_id=...)
view.state, view.message, view.nodes_listed, view.nodes_joined, view.waiting_to_join
view.upgrade   while an upgrade drains: from, to, and the Nodes done, draining and waiting
view.competing_device_plugins   Node -> the other device plugins bcd found there (no booking lands on it)
view.conditions   each step's condition as the last run left it: name, status, message, since
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select

from better_compute.compute import get_pool, get_pool_by_name, list_nodes
from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.clusters.upgrades import UpgradeProgress
from better_compute.kubernetes.policy import parse_substrate
from better_compute.kubernetes.tables import ClusterRow, SubstrateNodeRow, SubstrateRow
from better_compute.store import Database

__all__ = ["KubernetesSubstrates", "StepCondition", "SubstrateCluster", "SubstrateView", "WaitingToJoin"]


@dataclass(frozen=True, slots=True)
class SubstrateCluster:
    id: str
    name: str
    provider: str
    location: str
    status: str
    provider_cluster_id: str | None


@dataclass(frozen=True, slots=True)
class WaitingToJoin:
    count: int
    since: datetime | None


@dataclass(frozen=True, slots=True)
class StepCondition:
    """One step's condition (substrates/steps.py): `ok`, `waiting`, `error` or `skipped`, since when."""

    name: str
    status: str
    message: str | None
    since: datetime | None

    def to_dict(self) -> dict[str, Any]:
        since = self.since.isoformat() if self.since else None
        return {"name": self.name, "status": self.status, "message": self.message, "since": since}


def _conditions(stored: list[dict[str, Any]] | None) -> tuple[StepCondition, ...]:
    found = []
    for c in stored or []:
        since = c.get("since")
        found.append(
            StepCondition(
                str(c.get("name", "")),
                str(c.get("status", "")),
                c.get("message"),
                datetime.fromisoformat(since) if isinstance(since, str) else None,
            )
        )
    return tuple(found)


@dataclass(frozen=True, slots=True)
class SubstrateView:
    pool_id: str
    pool_name: str
    mode: str
    cluster: SubstrateCluster | None
    state: str
    message: str | None
    nodes_listed: tuple[str, ...]
    nodes_joined: tuple[str, ...]
    waiting_to_join: WaitingToJoin
    upgrade: dict[str, Any] | None
    updated_at: datetime | None
    next_attempt_at: datetime | None = None
    """When a teardown that failed tries again (the 2-minute retry, or the delete backoff)."""
    competing_device_plugins: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Node -> the other device plugins for bcd's resource that bcd found on it (doctor:
    kubernetes.substrate-competing-device-plugin). The Node takes no new booking while one is there."""
    conditions: tuple[StepCondition, ...] = ()
    """Each step's condition as the last run left it, in the run's order (none before the first run)."""

    def to_dict(self) -> dict[str, Any]:
        cluster = self.cluster
        return {
            "poolId": self.pool_id,
            "pool": self.pool_name,
            "mode": self.mode,
            "cluster": None
            if cluster is None
            else {
                "id": cluster.id,
                "name": cluster.name,
                "provider": cluster.provider,
                "location": cluster.location,
                "status": cluster.status,
                "providerClusterId": cluster.provider_cluster_id,
            },
            "state": self.state,
            "message": self.message,
            "nodesListed": list(self.nodes_listed),
            "nodesJoined": list(self.nodes_joined),
            "waitingToJoin": {
                "count": self.waiting_to_join.count,
                "since": self.waiting_to_join.since.isoformat() if self.waiting_to_join.since else None,
            },
            "upgrade": self.upgrade,
            "updatedAt": self.updated_at.isoformat() if self.updated_at else None,
            "nextAttemptAt": self.next_attempt_at.isoformat() if self.next_attempt_at else None,
            "competingDevicePlugins": {node: list(plugins) for node, plugins in self.competing_device_plugins.items()},
            "conditions": [c.to_dict() for c in self.conditions],
        }


class KubernetesSubstrates:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def get(self, *, tenant_id: str, pool_id: str) -> SubstrateView:
        """The substrate of the tenant's pool (by id, or by name); NOT_FOUND for a pool without one.

        A name finds an archived pool's substrate (its teardown's `deleted`, say) until a live pool
        takes the name again; the archived one is then read by its id."""
        async with self.db.session() as session:
            by_name = (
                await get_pool_by_name(session, tenant_id=tenant_id, name=pool_id, or_archived=True)
                if isinstance(pool_id, str)
                else None
            )
            pool = by_name or await get_pool(session, tenant_id=tenant_id, pool_id=pool_id)
            row = await session.get(SubstrateRow, pool.id)
            policy = pool.policy.get("substrate")
            if row is None:
                if not isinstance(policy, dict):
                    raise ComputeError(ErrorCode.NOT_FOUND, f"pool {pool.name!r} has no substrate", "/poolId")
                mode = parse_substrate(policy).mode
                return SubstrateView(
                    pool.id,
                    pool.name,
                    mode,
                    None,
                    "pending",
                    "waiting for the substrate reconciler",
                    (),
                    (),
                    WaitingToJoin(0, None),
                    None,
                    None,
                )
            cluster_row = await session.get(ClusterRow, row.cluster_id) if row.cluster_id else None
            listed = tuple(
                sorted(await session.scalars(select(SubstrateNodeRow.name).where(SubstrateNodeRow.pool_id == pool.id)))
            )
            members = await list_nodes(session, tenant_id=tenant_id, pool_id=pool.id)
            connected = {n.kubernetes_node_name for n in members if n.connected}
            competing = {
                n.kubernetes_node_name or n.name: n.competing_device_plugins
                for n in members
                if n.competing_device_plugins
            }
        joined = tuple(name for name in listed if name in connected)
        cluster = None
        if cluster_row is not None:
            cluster = SubstrateCluster(
                cluster_row.id,
                cluster_row.name,
                cluster_row.provider,
                cluster_row.location,
                cluster_row.status,
                cluster_row.provider_cluster_id,
            )
        waiting = len(listed) - len(joined)
        return SubstrateView(
            pool_id=pool.id,
            pool_name=pool.name,
            mode=row.mode,
            cluster=cluster,
            state=row.state,
            message=row.message,
            nodes_listed=listed,
            nodes_joined=joined,
            waiting_to_join=WaitingToJoin(waiting, row.waiting_since if waiting else None),
            upgrade=UpgradeProgress.from_json(cluster_row.upgrade).view(listed)
            if cluster_row is not None and cluster_row.upgrade
            else None,
            updated_at=row.updated_at,
            next_attempt_at=row.next_attempt_at,
            competing_device_plugins=competing,
            conditions=_conditions(row.conditions),
        )
