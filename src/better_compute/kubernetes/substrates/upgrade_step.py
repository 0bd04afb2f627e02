"""Step: carry an upgrade that drains one run further (the upgrade itself is asked in clusters/upgrades.py).

    control plane   upgraded in place through the driver; the step waits until it runs `to`
    node pools      one after another; the pool's Nodes are drained one at a time: cordoned
                    (in the pool and `spec.unschedulable` on the Node), then the drain waits
                    until the node's bookings end (nothing is force-released). Once every
                    Node of the pool is drained, the provider upgrades the pool; each Node
                    that is back (Ready, its kubelet at `to`) is uncordoned
    done            the upgrade is cleared from the cluster's row; the state read shows none

Where the provider upgrades the node pools with the control plane (DOKS), every Node is
drained before the control plane is asked, since that one call upgrades them all.

Each run starts from the progress saved on the cluster's row, and a Node is named as the
one draining before it is cordoned, so a run cut anywhere resumes without cordoning twice
or uncordoning a Node an operator had cordoned before (in the pool, or on the Node).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node as KubeNode

from better_compute.compute import active_count, cordon, list_nodes, uncordon
from better_compute.compute.changes import ChangeFeed
from better_compute.core.errors import ComputeError
from better_compute.engine import RunContext, enqueue
from better_compute.kubernetes.cluster_access.kube_api import kube_call
from better_compute.kubernetes.clusters.upgrades import UpgradeProgress
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import ClusterStatus, NodePoolStatus, ProviderKubernetes, version_matches
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.steps import SOON, StepContext, StepResult
from better_compute.kubernetes.tables import ClusterRow
from better_compute.vps.provider import ProviderAccount

__all__ = ["UpgradeRun", "UpgradeStep", "advance_upgrade"]


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    pool: str
    kubelet: str
    ready: bool
    unschedulable: bool


@dataclass(frozen=True, slots=True)
class UpgradeRun:
    """What one run needs: the substrate, its cluster at the provider, and this run's client."""

    k: KubernetesContext
    client: AsyncClient
    driver: ProviderKubernetes
    account: ProviderAccount
    tenant_id: str
    pool_id: str
    cluster_row_id: str
    provider_cluster_id: str
    node_pools: tuple[str, ...]
    lease: RunContext
    """The substrate's run: each write below is made under its lease."""


async def _list(client: AsyncClient, pool_id: str, pool_label: str) -> list[_Node]:
    async def collect() -> list[_Node]:
        found = []
        selector: dict[str, Any] = {SUBSTRATE_POOL_LABEL: pool_id}
        async for node in client.list(KubeNode, labels=selector):
            meta, status = node.metadata, node.status
            if meta is None or not meta.name:
                continue
            conditions = (status.conditions if status else None) or []
            info = status.nodeInfo if status else None
            found.append(
                _Node(
                    name=meta.name,
                    pool=(meta.labels or {}).get(pool_label, ""),
                    kubelet=info.kubeletVersion if info else "",
                    ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
                    unschedulable=bool(node.spec and node.spec.unschedulable),
                )
            )
        return sorted(found, key=lambda n: n.name)

    return await kube_call("listing the substrate's Nodes for the upgrade", collect())


async def _members(feed: ChangeFeed, tenant_id: str, pool_id: str) -> dict[str, tuple[str, str]]:
    """Kubernetes Node name -> (pool node id, state)."""
    async with feed.db.session() as session:
        nodes = await list_nodes(session, tenant_id=tenant_id, pool_id=pool_id)
    return {n.kubernetes_node_name: (n.id, n.state) for n in nodes if n.kubernetes_node_name}


async def _save(run: UpgradeRun, to: str, progress: UpgradeProgress | None, version: str | None) -> None:
    """Write the progress (None: the upgrade is done) under the run's lease, unless the row no
    longer holds this upgrade."""
    k, row_id = run.k, run.cluster_row_id
    now = k.clock.now()
    async with k.db.transaction() as session:
        row = await session.get(ClusterRow, row_id, with_for_update=True)
        if row is None or row.upgrade is None or row.upgrade.get("to") != to:
            return
        await run.lease.guard(session)
        row.upgrade = progress.to_json() if progress is not None else None
        if version is not None:
            row.version = version
        row.updated_at = now
        if progress is None:
            await enqueue(session, kind=CLUSTER_KIND, key=row_id, now=now)


class _Drain:
    def __init__(self, run: UpgradeRun, progress: UpgradeProgress, now: datetime) -> None:
        self.run = run
        self.progress = progress
        self.now = now

    async def _set_unschedulable(self, name: str, value: bool) -> None:
        await kube_call(
            f"{'cordoning' if value else 'uncordoning'} Node {name}",
            self.run.client.patch(KubeNode, name, {"spec": {"unschedulable": value}}),
        )

    async def drain(self, nodes: list[_Node]) -> bool:
        """Drain `nodes` one at a time; True once every one is cordoned with no booking left."""
        p, k = self.progress, self.run.k
        members = await _members(k.feed, self.run.tenant_id, self.run.pool_id)
        for node in nodes:
            if node.name in p.drained or node.name in p.done:
                continue
            member = members.get(node.name)
            if p.draining != node.name:
                p.draining = node.name
                if member is not None and member[1] == "cordoned" and node.name not in p.kept_cordoned:
                    p.kept_cordoned.append(node.name)
                if node.unschedulable and node.name not in p.kept_unschedulable:
                    p.kept_unschedulable.append(node.name)
                await _save(self.run, p.to, p, None)  # the intent, before the cordon
            if member is not None:
                async with k.feed.transaction() as session:
                    await hold(session, self.run.lease, self.run.pool_id)
                    if member[1] in ("joining", "ready"):
                        await cordon(session, member[0], self.now, reason=f"drained for the upgrade to {p.to}")
                    active = await active_count(session, node_id=member[0])
            else:
                active = 0
            if not node.unschedulable:
                await self._set_unschedulable(node.name, True)
            if active:
                p.message = (
                    f"upgrading to {p.to}: Node {node.name} is cordoned; waiting for its {active} booking(s) to end "
                    "(nothing is force-released)"
                )
                return False
            p.drained.append(node.name)
            p.draining = None
        return True

    async def uncordon_back(self, nodes: list[_Node]) -> bool:
        """Uncordon each drained Node that is back at `to`; True once every one of `nodes` is back."""
        p, k = self.progress, self.run.k
        members = await _members(k.feed, self.run.tenant_id, self.run.pool_id)
        back = True
        for node in nodes:
            if not (node.ready and version_matches(node.kubelet, p.to)):
                back = False
                continue
            if node.name in p.done:
                continue
            if node.name in p.drained:
                member = members.get(node.name)
                if member is not None and member[1] == "cordoned" and node.name not in p.kept_cordoned:
                    async with k.feed.transaction() as session:
                        await hold(session, self.run.lease, self.run.pool_id)
                        await uncordon(session, member[0], self.now, reason=f"upgraded to {p.to}")
                if node.unschedulable and node.name not in p.kept_unschedulable:
                    await self._set_unschedulable(node.name, False)
            p.done.append(node.name)
        return back


async def advance_upgrade(run: UpgradeRun, upgrade: dict[str, Any]) -> bool:
    """One run's worth of the upgrade, its progress saved on the cluster's row (also when a call
    fails); True once it is done."""
    progress = UpgradeProgress.from_json(upgrade)
    try:
        finished, version = await _advance(run, progress)
    except ComputeError:
        await _save(run, progress.to, progress, None)
        raise
    await _save(run, progress.to, None if finished else progress, version)
    return finished


async def _advance(run: UpgradeRun, p: UpgradeProgress) -> tuple[bool, str | None]:
    driver, account, cid = run.driver, run.account, run.provider_cluster_id
    vocabulary = driver.vocabulary
    drain = _Drain(run, p, run.k.clock.now())
    nodes = await _list(run.client, run.pool_id, vocabulary.node_pool_label)
    state = await driver.get_cluster(account, cid)
    outputs = state.outputs if state is not None else None
    if state is None or outputs is None:
        p.message = f"upgrading to {p.to}: the cluster is not ready"
        return False, None
    if not (state.status is ClusterStatus.READY and version_matches(outputs.version, p.to)):
        if vocabulary.pools_upgrade_with_cluster and not await drain.drain(nodes):
            return False, None
        if state.status is ClusterStatus.READY:
            await run.lease.fence()
            await driver.upgrade_cluster(account, cid, p.to)
        p.message = f"upgrading the control plane from {p.from_version} to {p.to}"
        return False, None
    for pool in run.node_pools:
        if pool in p.pools_done:
            continue
        members = [n for n in nodes if n.pool == pool]
        if not vocabulary.pools_upgrade_with_cluster:
            current = await driver.get_node_pool(account, cid, pool)
            at_target = (
                current is not None
                and current.status is NodePoolStatus.READY
                and current.version is not None
                and version_matches(current.version, p.to)
            )
            if current is not None and not at_target:
                if not await drain.drain(members):
                    return False, outputs.version
                if current.status is NodePoolStatus.READY:
                    await run.lease.fence()
                    await driver.upgrade_node_pool(account, cid, pool, p.to)
                p.message = f"upgrading node pool {pool} to {p.to}"
                await drain.uncordon_back(members)
                return False, outputs.version
        if not await drain.uncordon_back(members):
            p.message = f"node pool {pool}: waiting for its Nodes to come back at {p.to}"
            return False, outputs.version
        p.pools_done.append(pool)
    if not await drain.uncordon_back(nodes):  # a Node no node pool row names (its label gone) is still ours
        p.message = f"waiting for every Node to come back at {p.to}"
        return False, outputs.version
    return True, outputs.version


class UpgradeStep:
    """The `upgrade` condition: an upgrade that drains carried one run further (its progress is the
    upgrade view's); looked at again soon until it is done, also when a call of it failed."""

    name = "upgrade"
    needs: tuple[str, ...] = ()

    async def run(self, ctx: StepContext) -> StepResult:
        upgrade = ctx.cluster.upgrade
        if upgrade is None:
            return StepResult(self.name, "ok", "no upgrade")
        to = upgrade.get("to")
        run = UpgradeRun(
            ctx.k, ctx.client, ctx.driver, ctx.account, ctx.tenant_id, ctx.pool_id, ctx.cluster.id,
            ctx.provider_cluster_id, ctx.node_pools, ctx.run,
        )  # fmt: skip
        try:
            await ctx.run.fence()
            done = await advance_upgrade(run, upgrade)
        except ComputeError as exc:
            return StepResult(self.name, "error", f"upgrading to {to}: {exc.message}", SOON)
        if done:
            return StepResult(self.name, "ok", f"upgraded to {to}")
        return StepResult(self.name, "waiting", f"upgrading to {to}", SOON, in_message=False)
