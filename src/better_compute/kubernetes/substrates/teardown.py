"""The substrate's teardown: its own path, in the spec's order, each step safe to repeat.

    1. revoke the join token (and delete its Secret)
    2. cordon the nodes: in the pool, and `spec.unschedulable` on their Nodes
    3. wait for their bookings to end; nothing is force-released
    4. remove bcd: only the objects carrying the substrate's label
    5. delete the node pools (and a created cluster) through the clusters reconciler
    6. retire the nodes
    7. finish the pool's archive and release the account hold

A run stops at the first step that must wait and says why in the message; the next run
starts again at step 1, which is then a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node as KubeNode
from lightkube.resources.core_v1 import Secret
from sqlalchemy import delete

from better_compute.compute import (
    Pool,
    active_count,
    cordon,
    end_reservations_on_node,
    finish_archive,
    list_nodes,
    retire,
)
from better_compute.core.errors import ComputeError
from better_compute.engine import Outcome, RunContext, TemporaryError, enqueue
from better_compute.kubernetes.clusters.records import pool_cluster
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_POOL_LABEL, substrate_holder
from better_compute.kubernetes.substrates.agent_step import remove_bcd
from better_compute.kubernetes.substrates.cluster_api import cluster_client, kube_call, missing_ok
from better_compute.kubernetes.substrates.join_step import revoke_token
from better_compute.kubernetes.substrates.manifests import JOIN_SECRET, NAMESPACE
from better_compute.kubernetes.substrates.records import Found, save_found
from better_compute.kubernetes.tables import ClusterRow, SubstrateNodeRow, SubstrateRow
from better_compute.vps.accounts import release_account_hold

__all__ = ["WAIT_SECONDS", "teardown"]

WAIT_SECONDS = 30.0
"""How soon a teardown that waits (for bookings, for the provider) looks again."""


@dataclass(frozen=True)
class _Cluster:
    id: str
    account: str
    provider_cluster_id: str | None
    reachable: bool
    deleted: bool


async def _cordon_pool(k: KubernetesContext, pool: Pool) -> None:
    now = k.clock.now()
    async with k.feed.transaction() as session:
        for node in await list_nodes(session, tenant_id=pool.tenant_id, pool_id=pool.id):
            if node.state in ("joining", "ready"):
                await cordon(session, node.id, now)


async def _cordon_nodes(client: AsyncClient, pool_id: str) -> None:
    selector: dict[str, Any] = {SUBSTRATE_POOL_LABEL: pool_id}
    async for node in client.list(KubeNode, labels=selector):
        name = node.metadata.name if node.metadata else None
        if name and not (node.spec and node.spec.unschedulable):
            await missing_ok(f"cordoning Node {name}", client.patch(KubeNode, name, {"spec": {"unschedulable": True}}))


async def _cluster(k: KubernetesContext, pool_id: str) -> _Cluster | None:
    async with k.db.session() as session:
        row = await pool_cluster(session, pool_id)
    if row is None:
        return None
    reachable = row.provider_cluster_id is not None and row.endpoint is not None and row.status != "deleting"
    return _Cluster(row.id, row.account, row.provider_cluster_id, reachable, row.status == "deleted")


async def _in_cluster(k: KubernetesContext, pool: Pool, cluster: _Cluster, *, bookings_ended: bool) -> None:
    """Steps 1, 2 and (once bookings ended) 4 inside the cluster."""
    if cluster.provider_cluster_id is None:
        return
    account, driver = await k.account(pool.tenant_id, cluster.account)
    async with cluster_client(driver, account, cluster.provider_cluster_id) as client:
        await missing_ok("deleting the join Secret", client.delete(Secret, JOIN_SECRET, namespace=NAMESPACE))
        await kube_call("cordoning the substrate's Nodes", _cordon_nodes(client, pool.id))
        if bookings_ended:
            await kube_call("removing bcd", remove_bcd(client, pool.id))


async def teardown(k: KubernetesContext, run: RunContext, pool: Pool, substrate: SubstrateRow | None) -> Outcome:
    now = k.clock.now()
    if substrate is not None and substrate.state != "deleted":
        await save_found(k.db, pool.id, Found("deleting", "tearing down"), now)
    await revoke_token(k.db, pool.id, now)
    await _cordon_pool(k, pool)
    cluster = await _cluster(k, pool.id)
    async with k.db.session() as session:
        active = await active_count(session, pool_id=pool.id)
    if cluster is not None and cluster.reachable:
        await run.fence()  # the cluster writes below must not race a worker that took the item over
        try:
            await _in_cluster(k, pool, cluster, bookings_ended=active == 0)
        except ComputeError as exc:
            await save_found(
                k.db, pool.id, Found("deleting", f"could not remove bcd from the cluster: {exc.message}"), now
            )
            raise TemporaryError(f"removing bcd: {exc.message}", schedule="adopt") from exc
    if active:
        await save_found(
            k.db, pool.id, Found("deleting", f"waiting for {active} booking(s) to end; nothing is force-released"), now
        )
        return Outcome.requeue(WAIT_SECONDS)
    if cluster is not None and not cluster.deleted:
        async with k.db.transaction() as session:
            row = await session.get(ClusterRow, cluster.id, with_for_update=True)
            if row is not None and not row.delete_requested:
                row.delete_requested, row.updated_at = True, now
            await enqueue(session, kind=CLUSTER_KIND, key=cluster.id, now=now)
        k.wake()
        async with k.db.session() as session:
            row = await session.get(ClusterRow, cluster.id)
            status, message = (row.status, row.message) if row is not None else ("deleted", None)
        if status != "deleted":
            text = message if status == "error" and message else "deleting the node pools and the cluster"
            await save_found(k.db, pool.id, Found("error" if status == "error" else "deleting", text), now)
            return Outcome.requeue(WAIT_SECONDS)
    await run.fence()
    async with k.feed.transaction() as session:
        for node in await list_nodes(session, tenant_id=pool.tenant_id, pool_id=pool.id):
            await end_reservations_on_node(session, now=now, node_id=node.id)
            await retire(session, node.id, now)
        await session.execute(delete(SubstrateNodeRow).where(SubstrateNodeRow.pool_id == pool.id))
        if pool.state == "archiving":
            await finish_archive(session, now=now, pool_id=pool.id)
        await release_account_hold(session, holder=substrate_holder(pool.id))
    await save_found(k.db, pool.id, Found("deleted"), now)
    return Outcome.done()
