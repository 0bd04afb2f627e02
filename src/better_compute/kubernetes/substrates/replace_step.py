"""Step: a Node whose GPU needs a reset or is lost gets a new machine from the provider (issue 28, item 4).

Each run, for the substrate's listed Nodes:

    1. the failing ones: a pool node on the Node has a GPU in `reset-needed` (bcd holds it: a
       lost GPU, XID 48, 63, 64, 79 or 95, a pending or failed remap); a Node a shrink or an earlier
       run already sent away (`LEAVING_ANNOTATION` `removed` or `replaced`) is not one
    2. cordon each of them, in the pool (no new booking lands on a machine about to go) and in
       Kubernetes (`spec.unschedulable`, `LEAVING_ANNOTATION` `replacing`); its bookings stay, with
       the healthy GPUs they hold: nothing is force-released. A Node so marked whose GPUs no longer
       need a reset (reset on the node before its bookings ended) is uncordoned and stays
    3. replacement.choose: a failing Node with no booking left is replaced now, unless the pool
       has had `PER_HOUR` replacements in the last hour (counted from the decision log, where each
       is recorded); the others wait, and the substrate's message says for what
    4. mark it `replaced`, ask the provider to replace exactly that machine (remove_machines,
       replace=True: the count stays, an autoscaled flavor keeps its bounds), then record
       `node.machine-replaced` with the GPUs and why. The old Node goes with its machine, and the
       node step retires its pool node; the new machine's Node joins as a new node.

The call comes before the record: a run that dies between the mark and the record leaves a Node
marked `replaced` with no decision, and the next run asks again (a provider skips a machine already
going) and records it then; a Node with its decision recorded is not asked twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightkube.resources.core_v1 import Node as KubeNode

from better_compute.compute import Node, cordon, uncordon
from better_compute.core.errors import ComputeError
from better_compute.decisions import Decision, Kind, record, recorded_at
from better_compute.kubernetes import metrics
from better_compute.kubernetes.cluster_access.kube_api import missing_ok
from better_compute.kubernetes.names import LEAVING_ANNOTATION
from better_compute.kubernetes.replacement import PER_HOUR, WINDOW, Failing, choose, described, needing_reset
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.nodes_step import ListedNode
from better_compute.kubernetes.substrates.step_run import StepRun, mark
from better_compute.kubernetes.substrates.step_run import members as live_members
from better_compute.kubernetes.substrates.steps import StepContext, StepResult, gathered

__all__ = ["REPLACED", "REPLACING", "ReplaceStep", "Replacing", "replace_failing"]

REPLACING = "replacing"
"""`LEAVING_ANNOTATION` on a failing Node cordoned until it can be replaced."""
REPLACED = "replaced"
"""`LEAVING_ANNOTATION` on a Node whose machine the provider is (about to be) asked to replace."""


@dataclass(slots=True)
class Replacing:
    """What the step found: replacements that wait (the substrate says so), errors, and those asked now."""

    waiting: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)


async def replace_failing(s: StepRun, listed: list[ListedNode]) -> Replacing:
    found = Replacing()
    members = await live_members(s)
    now = s.k.clock.now()
    async with s.k.db.read() as session:
        recent = await recorded_at(
            session, tenant_id=s.tenant_id, pool_id=s.pool_id, kind=Kind.MACHINE_REPLACED, since=now - WINDOW
        )
    asked = {node_id for node_id, _ in recent}
    failing: dict[str, tuple[ListedNode, Failing, Node]] = {}
    for node in listed:
        member = members.get(node.name)
        if member is None or node.leaving == "removed":  # a shrink's: already going
            continue
        pool_node, bookings, _ = member
        sick = needing_reset(pool_node.devices)
        if node.leaving == REPLACED:  # marked, and the run died before the call was recorded: ask again
            if pool_node.id not in asked:
                await _replace(s, node, pool_node, described(sick), found)
            continue
        if sick:
            failing[node.name] = (node, Failing(node.name, described(sick), bookings), pool_node)
        elif node.leaving == REPLACING:  # its GPUs came back (reset on the node): it stays, and books again
            await _keep(s, node, pool_node)
    if not failing:
        return found
    await _cordon(s, {n: (f.why, p) for n, (_, f, p) in failing.items()})
    for node, _, _ in failing.values():
        await mark(s.client, [node], REPLACING)
    chosen = choose((f for _, f, _ in failing.values()), [at for _, at in recent], now)
    for wanted in chosen.booked:
        found.waiting.append(
            f"Node {wanted.name} waits to be replaced until its {wanted.bookings} booking(s) end "
            f"({wanted.why} needs a reset): cordoned, nothing is force-released"
        )
    if chosen.limited and chosen.next_allowed_at is not None:
        names = ", ".join(f.name for f in chosen.limited)
        found.waiting.append(
            f"Node(s) {names} wait to be replaced: at most {PER_HOUR} machines of a pool are replaced in an hour, "
            f"the next at {chosen.next_allowed_at.isoformat()}"
        )
    for wanted in chosen.now:
        node, failing_node, pool_node = failing[wanted.name]
        await mark(s.client, [node], REPLACED)
        await _replace(s, node, pool_node, failing_node.why, found)
    return found


async def _cordon(s: StepRun, failing: dict[str, tuple[str, Node]]) -> None:
    """Cordon the failing pool nodes not cordoned yet, in one transaction under the lease."""
    now = s.k.clock.now()
    async with s.k.feed.transaction() as session:
        await hold(session, s.run, s.pool_id)
        for why, node in failing.values():
            if node.state in ("joining", "ready"):
                await cordon(session, node.id, now, reason=f"its machine is to be replaced: {why} needs a reset")


async def _keep(s: StepRun, node: ListedNode, pool_node: Node) -> None:
    """Uncordon a Node cordoned for replacement whose GPUs no longer need a reset: the Node, then its pool node."""
    body = {"metadata": {"annotations": {LEAVING_ANNOTATION: None}}, "spec": {"unschedulable": False}}
    await missing_ok(f"uncordoning Node {node.name}", s.client.patch(KubeNode, node.name, body))
    async with s.k.feed.transaction() as session:
        await hold(session, s.run, s.pool_id)
        if pool_node.state == "cordoned":
            why = "its GPUs no longer need a reset (reset on the node): its machine stays"
            await uncordon(session, pool_node.id, s.k.clock.now(), reason=why)


async def _replace(s: StepRun, node: ListedNode, pool_node: Node, why: str, found: Replacing) -> None:
    """Ask the provider for a new machine in place of this one, then record it (the hour's limit counts it)."""
    if not node.provider_id or not node.node_pool:
        found.errors.append(f"replacing Node {node.name}: it carries no spec.providerID or node pool label yet")
        return
    try:
        await s.run.fence()
        await s.driver.remove_machines(s.account, s.cluster_id, node.node_pool, (node.provider_id,), replace=True)
    except ComputeError as exc:
        found.errors.append(f"replacing Node {node.name}: {exc.message}")
        return
    now = s.k.clock.now()
    async with s.k.db.transaction() as session:
        await hold(session, s.run, s.pool_id)
        decision = Decision(
            Kind.MACHINE_REPLACED, s.tenant_id, f"{why} needs a reset: the provider replaces its machine",
            pool_id=s.pool_id, node_id=pool_node.id, node_name=node.name,
            gpu_ids=tuple(d.uuid for d in needing_reset(pool_node.devices)),
            details={"providerId": node.provider_id},
        )  # fmt: skip
        await record(session, now, decision)
    metrics.REPLACEMENTS.labels(s.account.provider).inc()
    found.replaced.append(node.name)


class ReplaceStep:
    """The `replace` condition: the Nodes whose GPU needs a reset cordoned, and replaced once free."""

    name = "replace"
    needs: tuple[str, ...] = ("nodes",)

    async def run(self, ctx: StepContext) -> StepResult:
        s = StepRun(
            ctx.k, ctx.run, ctx.client, ctx.driver, ctx.account, ctx.provider_cluster_id, ctx.tenant_id, ctx.pool_id
        )
        found = await replace_failing(s, list(ctx.listed))
        done = f"asked the provider to replace Node(s) {', '.join(found.replaced)}" if found.replaced else None
        return gathered(self.name, found.errors, found.waiting, busy=bool(found.replaced), done=done)
