"""Step: list the substrate's Nodes, match them to pool nodes, and retire the ones that are gone.

A pool node is matched to its Kubernetes Node by the name bcd reports (the pod's
`spec.nodeName`, else its hostname) and, once a join proved it, the Node's uid: a Node
re-created under the name (a new uid) is another machine, so the old pool node is gone,
and the new Node is first seen now. A node of a Spot flavor carries the system label
`bc.dev/capacity=spot` from the moment it joins (see `admission`), and the match keeps
the label true to the Node's node pool. Each listed Node's node pool (the provider's label) and zone
are recorded too: the fleet plan tells from them which flavor and zone a booked Node is in. A matched node that is disconnected and whose
Node is gone has its reservations ended (spot ones, and all on a spot node, as
`preempted`; quota refunded once) and is then retired. A node that joined after the
list was taken (its Node was not there to be listed) is left to the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node as KubeNode
from sqlalchemy import delete, select

from better_compute.compute import SPOT_LABEL, end_reservations_on_node, list_nodes, retire, set_system_label
from better_compute.compute.changes import ChangeFeed
from better_compute.core.errors import ComputeError
from better_compute.engine import RunContext
from better_compute.kubernetes.cluster_access.kube_api import kube_call
from better_compute.kubernetes.names import CAPACITY_LABEL, LEAVING_ANNOTATION, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.steps import StepContext, StepResult, Update
from better_compute.kubernetes.tables import SubstrateNodeRow

__all__ = ["ZONE_LABEL", "ListedNode", "NodesSeen", "NodesStep", "list_substrate_nodes", "match_and_retire"]

ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True, slots=True)
class ListedNode:
    name: str
    spot: bool
    uid: str | None = None
    node_pool: str | None = None
    zone: str | None = None
    provider_id: str | None = None
    """Its `spec.providerID`: how the provider names the machine (what a shrink removes)."""
    leaving: str | None = None
    """How far a shrink has taken it (`LEAVING_ANNOTATION`: `cordoned`, `removed`); None: no shrink picked it."""


@dataclass(frozen=True, slots=True)
class NodesSeen:
    listed: tuple[str, ...]
    joined: tuple[str, ...]
    waiting: tuple[str, ...]
    retired: int
    first_waiting_seen_at: datetime | None


async def list_substrate_nodes(client: AsyncClient, pool_id: str, pool_label: str = "") -> list[ListedNode]:
    """The pool's Nodes; `pool_label` is the provider's label naming a Node's node pool (the vocabulary's)."""

    async def collect() -> list[ListedNode]:
        found = []
        selector: dict[str, Any] = {SUBSTRATE_POOL_LABEL: pool_id}
        async for node in client.list(KubeNode, labels=selector):
            meta = node.metadata
            if meta is None or not meta.name:
                continue
            labels = meta.labels or {}
            found.append(
                ListedNode(
                    meta.name,
                    labels.get(CAPACITY_LABEL) == "spot",
                    meta.uid,
                    labels.get(pool_label) if pool_label else None,
                    labels.get(ZONE_LABEL),
                    node.spec.providerID if node.spec else None,
                    (meta.annotations or {}).get(LEAVING_ANNOTATION),
                )
            )
        return found

    return await kube_call("listing the substrate's Nodes", collect())


async def match_and_retire(
    feed: ChangeFeed, run: RunContext, *, tenant_id: str, pool_id: str, listed: list[ListedNode], now: datetime
) -> NodesSeen:
    """Record the listed Nodes, keep matched nodes' spot label true, retire the gone ones (under the run's lease).

    `now` is the run's time, taken before the list: a pool node made at or after it may be
    on a Node the list could not see yet, and is not taken for gone."""
    by_name = {n.name: n for n in listed}
    async with feed.transaction() as session:
        await hold(session, run, pool_id)
        known = {
            r.name: r
            for r in await session.scalars(select(SubstrateNodeRow).where(SubstrateNodeRow.pool_id == pool_id))
        }
        for name, node in by_name.items():
            row = known.get(name)
            if row is None:
                row = SubstrateNodeRow(pool_id=pool_id, name=name, spot=node.spot, first_seen_at=now, uid=node.uid)
                session.add(row)
                known[name] = row
            elif row.uid is not None and row.uid != node.uid:  # re-created under its name: waiting from now
                row.uid, row.spot, row.first_seen_at = node.uid, node.spot, now
            else:
                row.uid, row.spot = node.uid, node.spot
            row.node_pool, row.zone = node.node_pool, node.zone
        gone = [name for name in known if name not in by_name]
        if gone:
            await session.execute(
                delete(SubstrateNodeRow).where(SubstrateNodeRow.pool_id == pool_id, SubstrateNodeRow.name.in_(gone))
            )
        joined: set[str] = set()
        retired = 0
        for member in await list_nodes(session, tenant_id=tenant_id, pool_id=pool_id):
            kube_name = member.kubernetes_node_name
            if kube_name is None:
                continue
            kube = by_name.get(kube_name)
            went = f"the Kubernetes Node {kube_name} is gone"
            if kube is not None and member.machine_id is not None and kube.uid not in (None, member.machine_id):
                kube = None  # the Node under its name is another machine: this one is gone
                went = f"the Kubernetes Node {kube_name} was re-created on another machine"
            if kube is not None:
                if member.spot != kube.spot:
                    await set_system_label(session, member.id, SPOT_LABEL, "spot" if kube.spot else None, now)
                if member.connected:
                    joined.add(kube_name)
            elif not member.connected and (member.created_at is None or member.created_at < now):
                why = f"{went} (Spot capacity the provider reclaimed)" if member.spot else went
                await end_reservations_on_node(session, now=now, node_id=member.id, reason=why)
                await retire(session, member.id, now, reason=why)
                retired += 1
        await session.flush()
        first_seen = {name: known[name].first_seen_at for name in by_name}
    waiting = tuple(sorted(n for n in by_name if n not in joined))
    return NodesSeen(
        listed=tuple(sorted(by_name)),
        joined=tuple(sorted(joined)),
        waiting=waiting,
        retired=retired,
        first_waiting_seen_at=min((first_seen[n] for n in waiting), default=None),
    )


class NodesStep:
    """The `nodes` condition: the substrate's Nodes listed and matched, the gone ones retired."""

    name = "nodes"
    needs: tuple[str, ...] = ()

    async def run(self, ctx: StepContext) -> StepResult:
        try:
            listed = await list_substrate_nodes(ctx.client, ctx.pool_id, ctx.driver.vocabulary.node_pool_label)
            await ctx.run.fence()  # each write below (retire, the bcd apply, the join Secret) is fenced
            seen = await match_and_retire(
                ctx.k.feed, ctx.run, tenant_id=ctx.tenant_id, pool_id=ctx.pool_id, listed=listed, now=ctx.now
            )
        except ComputeError as exc:
            return StepResult(self.name, "error", exc.message)
        retired = f", {seen.retired} retired" if seen.retired else ""
        message = f"{len(seen.listed)} listed, {len(seen.joined)} joined{retired}"
        return StepResult(self.name, "ok", message, update=Update(listed=tuple(listed), seen=seen))
