"""Step: a fixed flavor asks for fewer Nodes; the substrate picks the machines that go, not the provider.

The flavor's node-pool row keeps its count (records.held_back) while the document's is lower.
Each run, for each such flavor:

    1. read the node pool at the provider: a count already at the document's means the removal
       went through (a run that died between the call and the record) and only the record is left;
       a count above it with Nodes marked `removed` means a run died inside the removal (one
       machine asked, the next not): exactly those are asked again, never a new pick
    2. pick the Nodes that go with shrink.py (free ones first, then the least booked), once every
       machine the provider counts is listed (else the choice would miss one)
    3. `refuse` with a booked Node among them: nothing is cordoned or removed, the substrate says why
    4. cordon them: the pool nodes (no booking lands on them) and the Nodes (`spec.unschedulable`,
       marked `LEAVING_ANNOTATION`), counting their bookings again under the nodes' locks;
       `end` ends those bookings (quota refunded once; each cordon and ending is in the decision log)
    5. `wait` with a booking left: requeue, the Nodes stay cordoned until their bookings end
    6. mark them `removed`, ask the provider to remove exactly those machines with the count lowered
       in the same call (remove_machines, replace=False), and only then record the new count, so
       the clusters reconciler never asks the provider to shrink by its own choice

A Node marked `cordoned` that no shrink picks any more (another Node's bookings ended first, or
the document asks for more Nodes again) is uncordoned on both sides; one marked `removed` is
already going and stays as it is, unless its flavor's shrink is still pending and picked others.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lightkube.resources.core_v1 import Node as KubeNode

from better_compute.compute import active_count, cordon, end_reservations_on_node, list_nodes
from better_compute.compute import uncordon as uncordon_node
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.kube_api import missing_ok
from better_compute.kubernetes.names import LEAVING_ANNOTATION
from better_compute.kubernetes.policy import BookedNodes
from better_compute.kubernetes.provider import NodePoolState, NodePoolStatus
from better_compute.kubernetes.shrink import Candidate, Shrink, plan_shrink
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.nodes_step import ListedNode
from better_compute.kubernetes.substrates.step_run import Member, StepRun, mark
from better_compute.kubernetes.substrates.step_run import members as live_members
from better_compute.kubernetes.substrates.steps import StepContext, StepResult, gathered
from better_compute.kubernetes.tables import NodePoolRow

__all__ = ["CORDONED", "REMOVED", "PendingShrink", "ShrinkRun", "ShrinkStep", "Shrinking", "shrink_flavors"]

CORDONED = "cordoned"
"""`LEAVING_ANNOTATION` on a Node picked and cordoned, not yet asked of the provider."""
REMOVED = "removed"
"""`LEAVING_ANNOTATION` on a Node whose machine the provider is (about to be) asked to remove."""


@dataclass(frozen=True, slots=True)
class PendingShrink:
    """A fixed flavor whose document asks for fewer Nodes than its node-pool row records."""

    flavor: str
    node_pool_id: str
    pool_name: str
    target: int
    """The document's `nodes`, in the provider's unit (per zone where it counts so)."""


@dataclass(frozen=True, slots=True)
class ShrinkRun(StepRun):
    """What the step reaches (StepRun), and what the document says of booked Nodes."""

    booked_nodes: BookedNodes


@dataclass(slots=True)
class Shrinking:
    """What the step found: shrinks that wait (the substrate says so, and looks again sooner) and refusals."""

    waiting: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def shrink_flavors(s: ShrinkRun, pending: tuple[PendingShrink, ...], listed: list[ListedNode]) -> Shrinking:
    """Carry every pending shrink one step further, then uncordon the Nodes no shrink picks any more."""
    found = Shrinking()
    keep: set[str] = set()
    for shrink in pending:
        try:
            keep.update(await _shrink_one(s, shrink, listed, found))
        except ComputeError as exc:  # the flavor's marks stay: the next run decides again
            found.errors.append(f"flavor {shrink.flavor}: shrinking to {shrink.target} Node(s): {exc.message}")
            keep.update(n.name for n in listed if n.leaving and n.node_pool == shrink.pool_name)
    shrinking = {p.pool_name for p in pending}
    released = [
        n
        for n in listed
        if n.leaving in (CORDONED, REMOVED)  # its own marks: a Node marked for replacement stays so
        and n.name not in keep
        and (n.leaving == CORDONED or n.node_pool in shrinking)
    ]
    if released:
        await _release(s, released)
    return found


async def _shrink_one(s: ShrinkRun, p: PendingShrink, listed: list[ListedNode], found: Shrinking) -> set[str]:
    """One flavor's step; returns the Nodes that stay marked (picked, or going)."""
    current = await s.driver.get_node_pool(s.account, s.cluster_id, p.pool_name)
    going = [n for n in listed if n.leaving == REMOVED and n.node_pool == p.pool_name]
    if current is not None and current.node_count > p.target and going:
        current = await _resume(s, p, going)
    if current is None:
        return set()  # the clusters reconciler makes it, at the document's count
    if current.node_count <= p.target:
        await _record(s, p)
        return {n.name for n in listed if n.leaving == REMOVED and n.node_pool == p.pool_name}
    what = f"flavor {p.flavor}: shrinking to {p.target} Node(s)"
    if current.status is not NodePoolStatus.READY:
        found.waiting.append(
            f"{what} once its node pool is {NodePoolStatus.READY.value} (it is {current.status.value})"
        )
        return {n.name for n in listed if n.leaving and n.node_pool == p.pool_name}
    per_zone = s.driver.vocabulary.nodes_per_zone
    nodes = [n for n in listed if n.node_pool == p.pool_name]
    counted = Counter((n.zone or "") if per_zone else "" for n in nodes)
    if not counted or min(counted.values()) < current.node_count:
        found.waiting.append(f"{what} once every one of its {current.node_count} machine(s) has a Node")
        return {n.name for n in nodes if n.leaving}
    members = await live_members(s)
    shrink = plan_shrink(
        p.flavor,
        [_candidate(n, members.get(n.name), per_zone) for n in nodes],
        p.target,
        per_zone=per_zone,
        booked_nodes=s.booked_nodes,
    )
    if shrink is None:
        return set()
    names = [c.name for c in shrink.remove]
    if shrink.refused:
        booked = ", ".join(c.name for c in shrink.booked)
        found.errors.append(
            f"{what} would take booked Node(s) {booked}, and policy.substrate.disruption.bookedNodes is refuse: "
            "nothing was removed"
        )
        return set()
    left = await _cordon(s, p, shrink, {n: members[n] for n in names if n in members})
    by_name = {n.name: n for n in nodes}
    await mark(s.client, [by_name[n] for n in names], CORDONED)
    if left:
        booked = ", ".join(f"{n} ({count})" for n, count in sorted(left.items()))
        found.waiting.append(
            f"{what} waits for the bookings on Node(s) {booked} to end: cordoned, nothing is force-released "
            "(policy.substrate.disruption.bookedNodes is wait)"
        )
        return set(names)
    ids = tuple(by_name[n].provider_id or "" for n in names)
    if not all(ids):
        raise ComputeError(ErrorCode.INVALID_STATE, f"Node(s) {', '.join(names)} carry no spec.providerID yet")
    await mark(s.client, [by_name[n] for n in names], REMOVED)
    await s.run.fence()
    await s.driver.remove_machines(s.account, s.cluster_id, p.pool_name, ids, replace=False)
    await _record(s, p)
    return set(names)


async def _resume(s: ShrinkRun, p: PendingShrink, going: list[ListedNode]) -> NodePoolState | None:
    """A run died inside the removal it had decided (some machines asked, the count not recorded):
    ask again for exactly the Nodes it marked, never a new pick (the drivers skip what is already going)."""
    ids = tuple(n.provider_id for n in going if n.provider_id)
    await s.run.fence()
    await s.driver.remove_machines(s.account, s.cluster_id, p.pool_name, ids, replace=False)
    return await s.driver.get_node_pool(s.account, s.cluster_id, p.pool_name)


def _candidate(node: ListedNode, member: Member | None, per_zone: bool) -> Candidate:
    zone = (node.zone or "") if per_zone else ""
    if member is None:
        return Candidate(node.name, zone, joined=False)
    _, reservations, gpus = member
    return Candidate(node.name, zone, joined=True, reservations=reservations, gpus=gpus)


async def _cordon(s: ShrinkRun, p: PendingShrink, shrink: Shrink, members: dict[str, Member]) -> dict[str, int]:
    """Cordon the picked pool nodes and (`end`) end their bookings, in one transaction under the lease;
    returns the bookings still active on each picked Node, counted under the nodes' locks."""
    now = s.k.clock.now()
    why = f"shrink of flavor {p.flavor} to {p.target} Node(s): the substrate removes this Node"
    left: dict[str, int] = {}
    async with s.k.feed.transaction() as session:
        await hold(session, s.run, s.pool_id)
        for name, (node, _, _) in sorted(members.items()):
            if node.state in ("joining", "ready"):
                await cordon(session, node.id, now, reason=why)
            if s.booked_nodes == "end":
                reason = f"{why} (policy.substrate.disruption.bookedNodes is end)"
                await end_reservations_on_node(session, now=now, node_id=node.id, reason=reason)
            active = await active_count(session, node_id=node.id)
            if active:
                left[name] = active
    return left


async def _release(s: ShrinkRun, nodes: list[ListedNode]) -> None:
    """Uncordon Nodes a shrink cordoned and no longer picks: the Node first, then its pool node."""
    for node in nodes:
        body = {"metadata": {"annotations": {LEAVING_ANNOTATION: None}}, "spec": {"unschedulable": False}}
        await missing_ok(f"uncordoning Node {node.name}", s.client.patch(KubeNode, node.name, body))
    names = {n.name for n in nodes}
    now = s.k.clock.now()
    async with s.k.feed.transaction() as session:
        await hold(session, s.run, s.pool_id)
        for member in await list_nodes(session, tenant_id=s.tenant_id, pool_id=s.pool_id):
            if member.kubernetes_node_name in names and member.state == "cordoned":
                why = "the shrink that cordoned it takes another Node, or none"
                await uncordon_node(session, member.id, now, reason=why)


async def _record(s: ShrinkRun, p: PendingShrink) -> None:
    """The provider removed the picked machines: the row takes the document's count."""
    async with s.k.db.transaction() as session:
        row = await session.get(NodePoolRow, p.node_pool_id, with_for_update=True)
        await s.run.guard(session)
        if row is not None and row.min_nodes is None and row.node_count > p.target:
            row.node_count, row.updated_at = p.target, s.k.clock.now()


class ShrinkStep:
    """The `shrink` condition: each fixed flavor's pending shrink carried one step further, and the
    Nodes a shrink no longer picks uncordoned. Nothing to do without a shrink or a Node it marked."""

    name = "shrink"
    needs: tuple[str, ...] = ("nodes",)

    async def run(self, ctx: StepContext) -> StepResult:
        if not (ctx.shrinks or any(n.leaving for n in ctx.listed)):  # a shrink, or its marks left
            return StepResult(self.name, "ok", "no shrink pending")
        s = ShrinkRun(
            ctx.k, ctx.run, ctx.client, ctx.driver, ctx.account, ctx.provider_cluster_id,
            ctx.tenant_id, ctx.pool_id, ctx.booked_nodes,
        )  # fmt: skip
        await ctx.run.fence()
        found = await shrink_flavors(s, ctx.shrinks, list(ctx.listed))
        return gathered(self.name, found.errors, found.waiting, done="no shrink waits")
