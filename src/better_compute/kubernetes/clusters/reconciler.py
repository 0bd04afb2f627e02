"""The clusters reconciler (`kubernetes.cluster`, keyed by the cluster row's id).

Each run observes the cluster and its node pools at the provider and makes them what
the rows say:

    create   the row (the intent) exists before `ensure_cluster` is called, and the
             name is deterministic, so a run after a crash finds what the last one made
    pools    a missing node pool is made, a ready one resized (or, with autoscaling,
             only its bounds set: the count is the provider's autoscaler's), one of
             another shape is an error (shapes never change in place), a refused one
             (quota, stockout) is an error that leaves the others alone: the refusals
             are gathered and raised once every pool had its turn, so the engine counts
             them and backs off (its default schedule; a refused node-pool delete, the
             `delete` one)
    delete   node pools first (EKS refuses a cluster that still has them), then a
             created cluster; an adopted cluster is never deleted. A created cluster
             whose id was never recorded (the run died or failed right after the
             create) is looked up by its deterministic name (`find_cluster`): its row
             is marked deleted only once nothing is there. A refused delete (of a
             node pool or of the cluster) is retried on the `delete` schedule (5 minutes
             doubling to 6 hours), and the row says why and when (`message`,
             `next_attempt_at`: the engine's `retry_at`)
    adopt    an adopted cluster is read through `read_adoptable` until it is claimed; a
             refusal, or an adopted cluster gone, is retried every 2 minutes (`adopt`)
    claimed  node pools are made only once the substrate holds the in-cluster claim
             (`claimed_at`), on a created cluster as on an adopted one; an adopted
             cluster that never held it has none to delete
    claim    before any node pool, the cluster's provider-global id is claimed for the
             pool (claims.py); a cluster another pool holds goes to `error`

A converged run only reads. Whenever what the substrate acts on changes (the cluster's status, a node
pool ready or in error), the substrate is woken.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from sqlalchemy import delete

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine import ADOPT_RETRY, DELETE_BACKOFF, Outcome, RunContext, TemporaryError, enqueue
from better_compute.kubernetes.clusters.claims import claim_global_id
from better_compute.kubernetes.clusters.polling import poll_after
from better_compute.kubernetes.clusters.records import node_pool_of, node_pool_rows
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_KIND, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import (
    DEPLOYMENT_LABEL,
    Autoscaling,
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NodePoolState,
    NodePoolStatus,
    ProviderKubernetes,
)
from better_compute.kubernetes.tables import ClusterRow, NodePoolRow
from better_compute.vps.provider import ProviderAccount

__all__ = ["DRIFT_SECONDS", "POLL_SECONDS", "ClustersReconciler"]

log = logging.getLogger(__name__)

POLL_SECONDS = 15.0
"""How soon to look again while the provider is still working."""
DRIFT_SECONDS = 600.0
"""How soon to look again at a converged cluster (reads only)."""

_SETTLED = (NodePoolStatus.READY, NodePoolStatus.ERROR)
_MAKING_AGAIN = (NodePoolStatus.PROVISIONING, NodePoolStatus.DELETING, NodePoolStatus.DELETED)
_MADE_AGAIN = "; it is being made again"
"""Ends the message of a node pool whose creation failed at the provider, while it is made again."""


def _message(error: ComputeError) -> str:
    """The provider's message, led by its reason code when it has one (`devicePluginOn: ...`)."""
    text = f"{error.reason}: {error.message}" if error.reason else error.message
    return text[:2000]


class ClustersReconciler:
    kind = CLUSTER_KIND

    def __init__(self, k: KubernetesContext) -> None:
        self.k = k

    async def run(self, run: RunContext, key: str) -> Outcome:
        async with self.k.db.session() as session:
            row = await session.get(ClusterRow, key)
            pools = await node_pool_rows(session, key) if row is not None else []
            if row is not None:
                session.expunge_all()
        if row is None or row.status == "deleted":
            return Outcome.done()
        account, driver = await self.k.account(row.tenant_id, row.account)
        loaded = _Loaded(row, pools)
        since = _Since(row, pools)
        try:
            if row.delete_requested:
                outcome = await self._delete(run, row, pools, account, driver)
            else:
                outcome = await self._converge(run, row, pools, account, driver, since)
        finally:
            await self._save(run, row, pools, loaded)
        return outcome

    async def _converge(
        self,
        run: RunContext,
        row: ClusterRow,
        pools: list[NodePoolRow],
        account: ProviderAccount,
        driver: ProviderKubernetes,
        since: _Since,
    ) -> Outcome:
        if row.mode == "adopt" and row.global_id is None and row.provider_cluster_id:
            try:
                state: ClusterState | None = await driver.read_adoptable(account, row.provider_cluster_id)
            except ComputeError as exc:
                row.status, row.message = "error", f"cannot adopt {row.provider_cluster_id}: {_message(exc)}"
                raise TemporaryError(row.message, schedule=ADOPT_RETRY.name) from exc
        else:
            state = await driver.get_cluster(account, row.provider_cluster_id) if row.provider_cluster_id else None
        if state is None and row.mode == "adopt":
            row.status, row.message = "error", f"the adopted cluster {row.provider_cluster_id} was not found"
            raise TemporaryError(row.message, schedule=ADOPT_RETRY.name)
        if state is None:
            await run.fence()  # never create with a lease another worker holds
            spec = ClusterSpec(
                name=row.name,
                location=row.location,
                private_nodes=row.private_nodes,
                labels={SUBSTRATE_POOL_LABEL: row.substrate_pool_id or "", DEPLOYMENT_LABEL: await self.k.deployment()},
            )
            try:
                state = await driver.ensure_cluster(account, spec)
            except ComputeError as exc:
                row.status, row.message = "error", _message(exc)
                raise
            row.provider_cluster_id = state.cluster_id  # recorded whatever fails next
        global_id = state.outputs.global_id if state.outputs is not None else ""
        if global_id and row.global_id != global_id:
            holder = await claim_global_id(
                self.k.db,
                run,
                global_id,
                tenant_id=row.tenant_id,
                pool_id=row.substrate_pool_id or row.id,
                cluster_id=row.id,
                now=run.clock.now(),
            )
            if holder is not None:
                row.status = "error"
                row.message = (
                    f"cluster {state.cluster_id} ({global_id}) already backs {holder}, reached through "
                    "another provider account: one cluster backs one pool; nothing was created in it"
                )
                raise TemporaryError(row.message, schedule=ADOPT_RETRY.name)
        _observe_cluster(row, state)
        durations = driver.vocabulary.durations
        now = self.k.clock.now()
        if state.status is ClusterStatus.PROVISIONING:
            return Outcome.requeue(poll_after(since.cluster_age(row, now), durations.cluster_create))
        if state.status is not ClusterStatus.READY:
            return Outcome.requeue(POLL_SECONDS)
        if row.claimed_at is None:
            return Outcome.requeue(DRIFT_SECONDS)  # the substrate wakes this once it holds the in-cluster claim
        cluster_id = state.cluster_id
        waits = []
        refused = _Refused()
        estimate = {"provisioning": durations.node_pool_create, "updating": durations.node_pool_resize}
        for pool in pools:
            if pool.delete_requested:
                if not await self._remove_pool(run, account, driver, cluster_id, pool, refused):
                    waits.append(POLL_SECONDS)
                continue
            waiting_on = await self._converge_pool(run, account, driver, cluster_id, pool, refused)
            if waiting_on in estimate:
                waits.append(poll_after(since.pool_age(pool, now), estimate[waiting_on]))
            elif waiting_on is not None:
                waits.append(POLL_SECONDS)
        if refused.messages:  # gathered: every node pool had its turn, and the engine counts the failure
            raise refused.error()
        return Outcome.requeue(min(waits, default=DRIFT_SECONDS))

    async def _converge_pool(
        self,
        run: RunContext,
        account: ProviderAccount,
        driver: ProviderKubernetes,
        cluster_id: str,
        pool: NodePoolRow,
        refused: _Refused,
    ) -> str | None:
        """One node pool toward its row; returns None once it is settled (ready or in error), else the
        status it waits on. A refusal is the pool's message and is gathered in `refused`."""
        making_again = pool.status == "error" and (pool.message or "").endswith(_MADE_AGAIN)
        failed = False
        record = node_pool_of(pool)
        made = record.spec()  # what the row asks for, with this deployment's mark (for the orphan sweep)
        spec = replace(made, labels={**made.labels, DEPLOYMENT_LABEL: await self.k.deployment()})
        try:
            current = await driver.get_node_pool(account, cluster_id, pool.name)
            if current is None:
                await run.fence()
                current = await driver.ensure_node_pool(account, cluster_id, spec)
            elif current.machine_type != spec.machine_type or current.spot != spec.spot:
                pool.status = "error"
                pool.message = (
                    f"flavor {pool.flavor}: node pool {pool.name} is a {'Spot ' if current.spot else ''}"
                    f"{current.machine_type} and cannot become a {'Spot ' if spec.spot else ''}{spec.machine_type} "
                    "in place; add a flavor with the new shape and remove this one"
                )
                return None
            elif current.status is NodePoolStatus.ERROR:
                failed = True
                await run.fence()  # the driver deletes a node pool whose creation failed and makes it again
                current = await driver.ensure_node_pool(account, cluster_id, spec)
            elif current.status is NodePoolStatus.READY and _needs_resize(current, spec.node_count, record.autoscaling):
                await run.fence()
                # autoscaled: only the bounds are written, never the autoscaler's count
                current = await driver.resize_node_pool(
                    account, cluster_id, pool.name, spec.node_count, record.autoscaling
                )
        except ComputeError as exc:
            pool.status, pool.message = "error", f"flavor {pool.flavor}: {_message(exc)}"
            refused.add(exc, pool.message, removing=False)
            if failed:
                pool.message = pool.message[: 2048 - len(_MADE_AGAIN)] + _MADE_AGAIN
            return None
        if making_again and current.status in _MAKING_AGAIN:
            # A pool whose creation failed at the provider (an EKS node group's stockout shows only once
            # it is CREATE_FAILED) keeps its error and reason while it is deleted and made again, until
            # the pool made again is ready: the substrate stays in error for as long as the stockout lasts.
            pool.status = "error"
            return current.status.value
        pool.status = current.status.value
        pool.message = f"flavor {pool.flavor}: {current.message}" if current.message else None
        if pool.status == "ready" and _needs_resize(current, spec.node_count, record.autoscaling):
            pool.status = "updating"
        return None if current.status in _SETTLED and pool.status != "updating" else pool.status

    async def _remove_pool(
        self,
        run: RunContext,
        account: ProviderAccount,
        driver: ProviderKubernetes,
        cluster_id: str,
        pool: NodePoolRow,
        refused: _Refused,
    ) -> bool:
        """Delete a node pool whose flavor is gone; returns True once the provider has no such pool.
        A refused delete is the pool's message and is gathered in `refused`."""
        try:
            current = await driver.get_node_pool(account, cluster_id, pool.name)
            if current is None:
                pool.status = "deleted"
                return True
            if current.status is not NodePoolStatus.DELETING:
                await run.fence()
                await driver.delete_node_pool(account, cluster_id, pool.name)
        except ComputeError as exc:
            pool.message = f"flavor {pool.flavor} (removing): {_message(exc)}"
            refused.add(exc, pool.message, removing=True)
            return False
        pool.status = "deleting"
        return False

    async def _delete(
        self,
        run: RunContext,
        row: ClusterRow,
        pools: list[NodePoolRow],
        account: ProviderAccount,
        driver: ProviderKubernetes,
    ) -> Outcome:
        if row.mode == "adopt" and (row.provider_cluster_id is None or row.claimed_at is None):
            row.status = "deleted"  # an adopted cluster never claimed: nothing of ours in it
            for pool in pools:
                pool.status = "deleted"
            return Outcome.done()
        if row.provider_cluster_id is None:  # a run died or failed after the create, before the id was recorded
            state = await driver.find_cluster(account, row.name, row.location)
            if state is not None:
                row.provider_cluster_id = state.cluster_id
        else:
            state = await driver.get_cluster(account, row.provider_cluster_id)
        if state is None or row.provider_cluster_id is None:
            row.status, row.message = "deleted", None
            for pool in pools:
                pool.status = "deleted"
            return Outcome.done()
        remaining = [p for p in pools if p.status != "deleted"]
        pools_refused = _Refused()
        for pool in remaining:
            await self._remove_pool(run, account, driver, state.cluster_id, pool, pools_refused)
        if pools_refused.messages and pools_refused.deletes_only:  # the cluster waits: it says why and until when
            error = pools_refused.error()
            row.status, row.message = "error", f"the provider refused to delete a node pool: {error}"[:2000]
            row.next_attempt_at = run.retry_at(error)
            raise error
        if any(p.status != "deleted" for p in remaining):
            row.status, row.message, row.next_attempt_at = "deleting", None, None
            if pools_refused.messages:  # busy or throttled: soon, as the provider said
                raise pools_refused.error()
            return Outcome.requeue(POLL_SECONDS)
        if row.mode == "adopt":
            row.status, row.message = "deleted", None
            return Outcome.done()
        if state.status is not ClusterStatus.DELETING:
            await run.fence()
            try:
                await driver.delete_cluster(account, row.provider_cluster_id)
            except ComputeError as exc:
                row.status, row.message = "error", f"the provider refused to delete the cluster: {_message(exc)}"
                refused = TemporaryError(row.message, schedule=DELETE_BACKOFF.name)
                row.next_attempt_at = run.retry_at(refused)
                raise refused from exc
        row.status, row.message, row.next_attempt_at = "deleting", None, None
        return Outcome.requeue(POLL_SECONDS)

    async def _save(self, run: RunContext, row: ClusterRow, pools: list[NodePoolRow], loaded: _Loaded) -> None:
        """Write what this run changed of what it loaded, under its lease (a run whose lease is gone
        writes nothing); wake the substrate when what it acts on changed."""
        now = self.k.clock.now()
        async with self.k.db.transaction() as session:
            stored = await session.get(ClusterRow, row.id, with_for_update=True)
            if stored is None:
                return
            await run.guard(session)
            changed = loaded.cluster_changes(row)
            if "status" in changed and stored.status != row.status:
                stored.updated_at = now  # when the status began: the age polling.py reads
            for name, value in changed.items():
                setattr(stored, name, value)
            live = {p.id: p for p in await node_pool_rows(session, row.id)}
            for pool in pools:
                target = live.get(pool.id)
                if target is None:
                    continue
                if pool.status == "deleted" and target.delete_requested:
                    await session.execute(delete(NodePoolRow).where(NodePoolRow.id == pool.id))
                    continue
                pool_changed = loaded.pool_changes(pool)
                if "status" in pool_changed and target.status != pool.status:
                    target.updated_at = now
                for name, value in pool_changed.items():
                    setattr(target, name, value)
            woken = _seen_by_substrate(row, pools) != loaded.seen
            if woken and row.substrate_pool_id is not None:
                await enqueue(session, kind=SUBSTRATE_KIND, key=row.substrate_pool_id, now=now)
        if woken:
            self.k.wake()


class _Refused:
    """The node pools' refusals of one run, gathered so that one refused pool never stops the others."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.deletes_only = True
        """Every refusal is a delete the provider refused outright (not a busy or throttled answer)."""
        self.retry_after: float | None = None

    def add(self, exc: ComputeError, message: str, *, removing: bool) -> None:
        self.messages.append(message)
        transient = exc.code is ErrorCode.UNAVAILABLE
        self.deletes_only = self.deletes_only and removing and not transient
        if transient and exc.retry_after is not None:
            self.retry_after = max(self.retry_after or 0.0, exc.retry_after)

    def error(self) -> TemporaryError:
        """Refused deletes are retried on the `delete` schedule (5 minutes doubling to 6 hours); a busy
        provider when it said to come back (`retry_after`); any other refusal (a quota, a stockout) on
        the engine's default backoff."""
        message = "; ".join(self.messages)[:2000]
        if self.deletes_only:
            return TemporaryError(message, schedule=DELETE_BACKOFF.name)
        return TemporaryError(message, delay=self.retry_after)


_CLUSTER_FIELDS = (
    "provider_cluster_id",
    "global_id",
    "status",
    "message",
    "endpoint",
    "version",
    "location",
    "next_attempt_at",
)
_POOL_FIELDS = ("status", "message")


class _Loaded:
    """What a run loaded, so that it writes back only the fields it changed: a field it did not
    observe (another worker's, another reconciler's) is never written over with a stale value."""

    def __init__(self, row: ClusterRow, pools: list[NodePoolRow]) -> None:
        self.cluster = {name: getattr(row, name) for name in _CLUSTER_FIELDS}
        self.pools = {p.id: {name: getattr(p, name) for name in _POOL_FIELDS} for p in pools}
        self.seen = _seen_by_substrate(row, pools)

    def cluster_changes(self, row: ClusterRow) -> dict[str, object]:
        return {name: getattr(row, name) for name, was in self.cluster.items() if getattr(row, name) != was}

    def pool_changes(self, pool: NodePoolRow) -> dict[str, object]:
        was = self.pools.get(pool.id, {})
        return {
            name: getattr(pool, name) for name in _POOL_FIELDS if name not in was or getattr(pool, name) != was[name]
        }


class _Since:
    """The statuses a run started with, so that a status it changed counts as beginning now."""

    def __init__(self, row: ClusterRow, pools: list[NodePoolRow]) -> None:
        self.cluster = row.status
        self.pools = {p.id: p.status for p in pools}

    def cluster_age(self, row: ClusterRow, now: datetime) -> float:
        return 0.0 if row.status != self.cluster else max(0.0, (now - row.updated_at).total_seconds())

    def pool_age(self, pool: NodePoolRow, now: datetime) -> float:
        if pool.status != self.pools.get(pool.id):
            return 0.0
        return max(0.0, (now - pool.updated_at).total_seconds())


def _needs_resize(current: NodePoolState, node_count: int, autoscaling: Autoscaling | None) -> bool:
    """A fixed pool needs its count; an autoscaled one only its bounds (never the autoscaler's count)."""
    if autoscaling is not None:
        return current.autoscaling != autoscaling
    return current.autoscaling is not None or current.node_count != node_count


def _observe_cluster(row: ClusterRow, state: ClusterState) -> None:
    row.provider_cluster_id = state.cluster_id
    row.status = state.status.value
    row.message = state.message
    if state.outputs is not None:
        row.endpoint = state.outputs.endpoint
        row.version = state.outputs.version
        row.global_id = state.outputs.global_id or row.global_id
        row.location = state.outputs.location or row.location  # an adopted cluster's is known only from here


def _seen_by_substrate(row: ClusterRow, pools: list[NodePoolRow]) -> tuple[object, ...]:
    """What the substrate acts on: the cluster's status, message and next delete attempt, and which
    node pools are ready or in error (with the error). A pool going from pending to provisioning or updating changes
    nothing there, and each substrate run mints a credential at the provider."""
    settled = ("ready", "error")
    return (
        row.status,
        row.message,
        row.next_attempt_at,
        tuple(
            (p.id, p.status if p.status in settled else "busy", p.message if p.status == "error" else None)
            for p in pools
        ),
    )
