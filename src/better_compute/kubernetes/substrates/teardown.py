"""The substrate's teardown: its own path, in the spec's order, each step safe to repeat.

    1. revoke the join token (and delete its Secret)
    2. cordon the nodes: in the pool, and `spec.unschedulable` on their Nodes
    3. wait for their bookings to end; nothing is force-released (counted again, under the
       pool's lock, in the transaction that retires the nodes)
    4. remove bcd: only the objects carrying the substrate's label
    5. delete the node pools (and a created cluster) through the clusters reconciler
    6. on an adopted cluster whose in-cluster claim names this pool (whatever the database
       says): revoke bc-substrate, then delete the claim (a
       created cluster's claim went with the cluster in step 5: deleting it before would
       let another deployment adopt a cluster that is about to be deleted)
    7. retire the nodes
    8. finish the pool's archive, drop the pool's claims and release the account hold

A run stops at the first step that must wait and says why in the message; the next run
starts again at step 1, which is then a no-op. On an adopted cluster the substrate works
as bc-substrate, and only once it holds the in-cluster claim: one that never held it
removes nothing. When bcd or that access cannot be removed from an adopted cluster, the
substrate stays `deleting`, says so, and retries every 2 minutes (`next_attempt_at`). On a
created cluster a failure to remove bcd (a control plane that stopped answering) never
blocks the delete once the bookings have ended: deleting the cluster removes bcd with it.
A created cluster the provider refuses to delete is `error` on the delete backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node as KubeNode
from lightkube.resources.core_v1 import Secret
from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute import (
    Pool,
    active_count,
    cordon,
    finish_archive,
    list_nodes,
    retire,
)
from better_compute.compute.pools import pool_row
from better_compute.core.errors import ComputeError
from better_compute.engine import ADOPT_RETRY, Outcome, RunContext, TemporaryError, enqueue
from better_compute.kubernetes.cluster_access.adopted_cluster import leave_adopted, reach_adopted
from better_compute.kubernetes.cluster_access.kube_api import cluster_client, credentials_client, kube_call, missing_ok
from better_compute.kubernetes.clusters.claims import release_global_claims
from better_compute.kubernetes.clusters.records import pool_cluster
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_POOL_LABEL, substrate_holder
from better_compute.kubernetes.substrates.agent_step import remove_bcd
from better_compute.kubernetes.substrates.join_step import revoke_token
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.manifests import JOIN_SECRET, NAMESPACE
from better_compute.kubernetes.substrates.substrate_rows import Found, save_found
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
    adopted: bool
    claimed: bool


async def _cordon_pool(k: KubernetesContext, run: RunContext, pool: Pool) -> None:
    now = k.clock.now()
    async with k.feed.transaction() as session:
        await hold(session, run, pool.id)
        for node in await list_nodes(session, tenant_id=pool.tenant_id, pool_id=pool.id):
            if node.state in ("joining", "ready"):
                await cordon(session, node.id, now, reason=f"pool {pool.name}'s substrate is being torn down")


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
    adopted = row.mode == "adopt"
    return _Cluster(
        row.id,
        row.account,
        row.provider_cluster_id,
        reachable,
        row.status == "deleted",
        adopted,
        row.claimed_at is not None,
    )


@asynccontextmanager
async def _reach(k: KubernetesContext, pool: Pool, cluster: _Cluster) -> AsyncIterator[AsyncClient]:
    """The cluster as the substrate reaches it: bc-substrate on an adopted one, else the provider's credential."""
    account, driver = await k.account(pool.tenant_id, cluster.account)
    cluster_id = cluster.provider_cluster_id or ""
    if cluster.adopted:
        credentials = await reach_adopted(driver, account, cluster_id, pool.id, k.clock.now(), await k.deployment())
        async with credentials_client(credentials) as client:
            yield client
    else:
        async with cluster_client(driver, account, cluster_id) as client:  # this run's own admin credential
            yield client


async def _in_cluster(k: KubernetesContext, pool: Pool, cluster: _Cluster, *, bookings_ended: bool) -> None:
    """Steps 1, 2 and (once bookings ended) 4 inside the cluster; nothing on an adopted cluster never claimed."""
    if cluster.provider_cluster_id is None or (cluster.adopted and not cluster.claimed):
        return
    async with _reach(k, pool, cluster) as client:
        await missing_ok("deleting the join Secret", client.delete(Secret, JOIN_SECRET, namespace=NAMESPACE))
        await kube_call("cordoning the substrate's Nodes", _cordon_nodes(client, pool.id))
        if bookings_ended:
            await kube_call("removing bcd", remove_bcd(client, pool.id))


async def teardown(k: KubernetesContext, run: RunContext, pool: Pool, substrate: SubstrateRow | None) -> Outcome:
    now = k.clock.now()
    if substrate is not None and substrate.state != "deleted":
        await save_found(k.feed, run, pool.id, Found("deleting", "tearing down"), now)
    await revoke_token(k.db, run, pool.id, now, reason=f"pool {pool.name}'s substrate is being torn down")
    await _cordon_pool(k, run, pool)
    cluster = await _cluster(k, pool.id)
    async with k.db.session() as session:
        active = await active_count(session, pool_id=pool.id)
    unreached = ""
    if cluster is not None and cluster.reachable:
        await run.fence()  # the cluster writes below must not race a worker that took the item over
        try:
            await _in_cluster(k, pool, cluster, bookings_ended=active == 0)
        except ComputeError as exc:
            if cluster.adopted:
                why = f"could not remove bcd from the cluster: {exc.message}"
                raise await _retrying(k, run, pool.id, why, f"removing bcd: {exc.message}", now) from exc
            unreached = f"; could not reach the cluster ({exc.message}), whose delete removes bcd with it"
    if active:
        return await _wait_for_bookings(k, run, pool.id, active, now, unreached)
    if cluster is not None and not cluster.deleted:
        async with k.db.transaction() as session:
            row = await session.get(ClusterRow, cluster.id, with_for_update=True)
            if row is not None and not row.delete_requested:
                await run.guard(session)
                # Queued once: queueing on every run would retry a refused delete ahead of its backoff.
                row.delete_requested, row.updated_at = True, now
                await enqueue(session, kind=CLUSTER_KIND, key=cluster.id, now=now)
        k.wake()
        async with k.db.session() as session:
            row = await session.get(ClusterRow, cluster.id)
            status, message, next_at = (
                (row.status, row.message, row.next_attempt_at) if row is not None else ("deleted", None, None)
            )
        if status != "deleted":
            if status == "error" and message:
                when = f"; the next attempt is at {next_at.isoformat()}" if next_at else ""
                await save_found(k.feed, run, pool.id, Found("error", message + when, next_attempt_at=next_at), now)
                if next_at is not None:  # nothing to do until the provider is asked again (it wakes us then)
                    return Outcome.requeue(max(WAIT_SECONDS, (next_at - now).total_seconds()))
            else:
                await save_found(
                    k.feed, run, pool.id, Found("deleting", "deleting the node pools and the cluster"), now
                )
            return Outcome.requeue(WAIT_SECONDS)
    await run.fence()
    await _leave_adopted_clusters(k, run, pool, now)
    await run.fence()
    async with k.feed.transaction() as session:
        await hold(session, run, pool.id)
        # Counted again under the pool's lock, which bookers share: one made since the count above
        # (an operator uncordoned a node and booked it) stops the teardown here, with nothing released.
        await pool_row(session, pool_id=pool.id, lock=True)
        appeared = await active_count(session, pool_id=pool.id)
        if not appeared:
            await _finish(session, pool, now)
    if appeared:
        return await _wait_for_bookings(k, run, pool.id, appeared, now)
    await save_found(k.feed, run, pool.id, Found("deleted"), now)
    return Outcome.done()


async def _finish(session: AsyncSession, pool: Pool, now: datetime) -> None:
    """Steps 7 and 8, in the caller's transaction, once no booking is left on the locked pool."""
    for node in await list_nodes(session, tenant_id=pool.tenant_id, pool_id=pool.id):
        await retire(session, node.id, now, reason=f"pool {pool.name}'s substrate was torn down: its machines are gone")
    await session.execute(delete(SubstrateNodeRow).where(SubstrateNodeRow.pool_id == pool.id))
    if pool.state == "archiving":
        await finish_archive(session, now=now, pool_id=pool.id)
    await release_global_claims(session, pool.id)
    await release_account_hold(session, holder=substrate_holder(pool.id))


async def _wait_for_bookings(
    k: KubernetesContext, run: RunContext, pool_id: str, active: int, now: datetime, unreached: str = ""
) -> Outcome:
    waiting = f"waiting for {active} booking(s) to end; nothing is force-released{unreached}"
    await save_found(k.feed, run, pool_id, Found("deleting", waiting), now)
    return Outcome.requeue(WAIT_SECONDS)


async def _retrying(
    k: KubernetesContext, run: RunContext, pool_id: str, why: str, error: str, now: datetime
) -> TemporaryError:
    """Stay `deleting`, and say what failed and when the engine retries (the 2-minute retry);
    returns the error for the caller to raise."""
    retry = TemporaryError(error, schedule=ADOPT_RETRY.name)
    next_at = run.retry_at(retry)
    text = f"{why}; retrying every 2 minutes, next at {next_at.isoformat()}"
    await save_found(k.feed, run, pool_id, Found("deleting", text, next_attempt_at=next_at), now)
    return retry


async def _leave_adopted_clusters(k: KubernetesContext, run: RunContext, pool: Pool, now: datetime) -> None:
    """Step 6, once the node pools are gone: on each adopted cluster the pool set out to claim
    (`claiming_at`, recorded before the claim was taken, even if `claimed_at` never was), revoke
    bc-substrate and delete the claim when the in-cluster claim names this pool, then forget both."""
    async with k.db.session() as session:
        rows = list(
            await session.scalars(
                select(ClusterRow).where(
                    ClusterRow.substrate_pool_id == pool.id,
                    ClusterRow.mode == "adopt",
                    or_(ClusterRow.claiming_at.is_not(None), ClusterRow.claimed_at.is_not(None)),
                )
            )
        )
    for row in rows:
        account, driver = await k.account(pool.tenant_id, row.account)
        try:
            await leave_adopted(driver, account, row.provider_cluster_id or "", pool.id)
        except ComputeError as exc:
            why = f"could not take back better-compute's access to the cluster: {exc.message}"
            raise await _retrying(k, run, pool.id, why, f"revoking bc-substrate: {exc.message}", now) from exc
        async with k.db.transaction() as session:
            stored = await session.get(ClusterRow, row.id, with_for_update=True)
            if stored is not None:
                await run.guard(session)
                stored.claiming_at = stored.claimed_at = None
