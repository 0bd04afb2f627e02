"""The substrate reconciler (`kubernetes.substrate`, keyed by the pool id): load, steps, apply.

    load      the pool and its substrate row; a pool being archived, or whose
              `policy.substrate` is gone, takes the teardown path (teardown.py)
    intent    the cluster and node-pool rows the policy asks for (clusters/records.py),
              recorded before any provider call; the clusters reconciler makes them real
    steps     once the cluster is ready, with a 600 s credential held for this run, `STEPS`
              in order, each with one contract (steps.py): list and match Nodes, retire
              the gone ones (nodes_step), remove the Nodes a fixed flavor's shrink picks
              (shrink_step), replace failing machines (replace_step), apply bcd
              (agent_step), keep a join token while Nodes wait (join_step), carry an
              upgrade that drains one run further (upgrade_step)
    apply     the state, message, Nodes seen and each step's condition, from every step's
              result gathered, in one transaction under the run's lease (records.save_found)

Every cluster a substrate backs carries the in-cluster claim (claim.py) before any node
pool is made or bcd applied: a created cluster is claimed once, when it is first ready;
on an adopted one the steps run as `bc-substrate` (adopted.py), and each run first takes
(or finds its own) claim and makes the identity where missing. A cluster another pool
(of this deployment or another) claims is `error` (`claimedElsewhere`) and retried every
2 minutes, with nothing made in it.

The steps' errors are gathered, not short-circuited: a refused flavor or a failed apply
leaves the others to run (a step whose prerequisite failed is `skipped`), the substrate is
`error` with the reasons, and the soonest requeue a step asks for wins. Only a cluster
that is not ready (never answered, being deleted) stops the steps. Every failure is raised
to the engine as a `TemporaryError` with its schedule (`adopt`, or the watch's 60 s for
gathered errors), so the engine counts it, retries it and doctor reports it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine import ADOPT_RETRY, Outcome, RunContext, TemporaryError, enqueue
from better_compute.kubernetes.cluster_access.adopted_cluster import reach_adopted
from better_compute.kubernetes.cluster_access.cluster_claim import take_claim
from better_compute.kubernetes.cluster_access.kube_api import credentials_client
from better_compute.kubernetes.clusters.records import held_back, node_pool_rows, record_desired
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.desired import DesiredSubstrate, desired_substrate
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_KIND
from better_compute.kubernetes.policy import BookedNodes
from better_compute.kubernetes.provider import ProviderKubernetes
from better_compute.kubernetes.substrates.agent_step import AgentStep
from better_compute.kubernetes.substrates.join_step import JoinStep
from better_compute.kubernetes.substrates.nodes_step import NodesStep
from better_compute.kubernetes.substrates.replace_step import ReplaceStep
from better_compute.kubernetes.substrates.shrink_step import PendingShrink, ShrinkStep
from better_compute.kubernetes.substrates.steps import SOON, Ran, Step, StepContext, Update, run_steps, skipped
from better_compute.kubernetes.substrates.substrate_rows import Found, load_pool, save_found, substrate_row
from better_compute.kubernetes.substrates.teardown import teardown
from better_compute.kubernetes.substrates.upgrade_step import UpgradeStep
from better_compute.kubernetes.tables import ClusterRow, NodePoolRow, SubstrateRow
from better_compute.vps.provider import ProviderAccount

__all__ = ["AGENT_MISSING", "STEPS", "WATCH_SECONDS", "SubstratesReconciler", "wake_waiting_for_agent"]

log = logging.getLogger(__name__)

WATCH_SECONDS = 60.0
"""How soon a settled substrate looks at its Nodes again."""
WAIT_SECONDS = SOON
"""How soon a substrate whose upgrade drains, or whose ready cluster has no provider id yet, looks again."""
CLUSTER_WAIT_SECONDS = 300.0
"""How soon a substrate whose cluster is not ready looks again: only a safety net, since the
clusters reconciler wakes it in the transaction that saves any change it acts on (status,
message, a node pool ready or failed). A shorter wait ran it some twenty times a cluster
creation for nothing."""
AGENT_WAIT_SECONDS = 600.0
"""How soon a substrate that waits for an agent looks again (another replica may have one);
a server started with an agent wakes it at once (`wake_waiting_for_agent`)."""
STEPS: tuple[Step, ...] = (NodesStep(), ShrinkStep(), ReplaceStep(), AgentStep(), JoinStep(), UpgradeStep())
"""The run's steps, in order: each owns its condition (steps.py); shrink, replace and join need nodes."""
STEP_NAMES = tuple(step.name for step in STEPS)
SETTLING = ("pending", "provisioning", "updating")
"""Node pool statuses of an operation still in progress at the provider."""
AGENT_MISSING = (
    'kubernetes.substrate-agent-missing: kubernetes() was built without substrate={"agent": ...}, '
    "so nothing can run bcd on the cluster"
)


class SubstratesReconciler:
    kind = SUBSTRATE_KIND

    def __init__(self, k: KubernetesContext) -> None:
        self.k = k

    async def run(self, run: RunContext, key: str) -> Outcome:
        async with self.k.db.read() as session:
            pool = await load_pool(session, key)
        if pool is None:
            return Outcome.done()
        policy = pool.policy.get("substrate")
        if pool.state != "active" or not isinstance(policy, dict):
            async with self.k.db.read() as session:  # only the teardown reads the row here
                substrate = await session.get(SubstrateRow, key)
            if substrate is None or substrate.state == "deleted":
                return await teardown(self.k, run, pool, substrate) if pool.state == "archiving" else Outcome.done()
            return await teardown(self.k, run, pool, substrate)
        desired = desired_substrate(pool.id, policy)
        now = self.k.clock.now()
        if self.k.agent is None:  # nothing is made at a provider when nothing could run bcd there
            async with self.k.feed.transaction() as session:
                await substrate_row(session, pool, mode=desired.mode, now=now)
                await run.guard(session)
            missing = Found("error", AGENT_MISSING, conditions=skipped(STEP_NAMES, AGENT_MISSING))
            await save_found(self.k.feed, run, pool.id, missing, now)
            return Outcome.requeue(AGENT_WAIT_SECONDS)
        account, driver = await self.k.account(pool.tenant_id, desired.account)
        try:
            async with self.k.feed.transaction() as session:
                row = await substrate_row(session, pool, mode=desired.mode, now=now)
                await run.guard(session)  # the substrate's row is locked: record_desired writes under the lease
                cluster, changed = await record_desired(
                    session,
                    now=now,
                    tenant_id=pool.tenant_id,
                    pool_id=pool.id,
                    provider=account.provider,
                    desired=desired,
                )
                row.cluster_id = cluster.id
                if changed:
                    await enqueue(session, kind=CLUSTER_KIND, key=cluster.id, now=now)
                node_pools = [p for p in await node_pool_rows(session, cluster.id) if not p.delete_requested]
                flavor_errors = [p.message or f"flavor {p.flavor} failed" for p in node_pools if p.status == "error"]
                shrinks = _pending_shrinks(desired, node_pools)
                session.expunge(cluster)
        except ComputeError as exc:
            if exc.code is not ErrorCode.CONFLICT:
                raise
            async with self.k.feed.transaction() as session:  # the refusal is the substrate's message
                await substrate_row(session, pool, mode=desired.mode, now=now)
                await run.guard(session)
            raise await self._failed(run, pool.id, exc.message, now) from exc
        if changed:
            self.k.wake()
        pool_names = tuple(p.name for p in node_pools)
        settling = any(p.status in SETTLING for p in node_pools)
        return await self._steps(
            run,
            pool.id,
            pool.tenant_id,
            cluster,
            account,
            driver,
            flavor_errors,
            pool_names,
            settling,
            shrinks,
            desired.booked_nodes,
        )

    async def _steps(
        self,
        run: RunContext,
        pool_id: str,
        tenant_id: str,
        cluster: ClusterRow,
        account: ProviderAccount,
        driver: ProviderKubernetes,
        errors: list[str],
        node_pools: tuple[str, ...],
        settling: bool,
        shrinks: tuple[PendingShrink, ...],
        booked_nodes: BookedNodes,
    ) -> Outcome:
        now = self.k.clock.now()
        if cluster.status != "ready" and not (cluster.status in ("updating", "error") and cluster.endpoint):
            state = "error" if cluster.status == "error" else "provisioning"
            message = cluster.message if cluster.status == "error" else f"the cluster is {cluster.status}"
            not_ready = Found(state, message, conditions=skipped(STEP_NAMES, f"the cluster is {cluster.status}"))
            await save_found(self.k.feed, run, pool_id, not_ready, now)
            return Outcome.requeue(CLUSTER_WAIT_SECONDS)
        agent = self.k.agent
        if agent is None or cluster.provider_cluster_id is None:
            return Outcome.requeue(WAIT_SECONDS)
        if cluster.mode == "adopt":
            if cluster.claiming_at is None and cluster.claimed_at is None:
                await self._claiming(run, cluster.id, now)  # the intent, recorded before the claim is taken
            try:
                credentials = await reach_adopted(
                    driver, account, cluster.provider_cluster_id, pool_id, now, await self.k.deployment()
                )
            except ComputeError as exc:
                raise await self._failed(run, pool_id, f"could not reach the cluster: {_why(exc)}", now) from exc
            reach = credentials_client(credentials)
        else:
            try:  # this run's own admin credential, minted now and dropped when the run ends
                admin = await driver.credentials(account, cluster.provider_cluster_id)
            except ComputeError as exc:
                if cluster.claimed_at is None:
                    raise await self._failed(run, pool_id, f"could not claim the cluster: {_why(exc)}", now) from exc
                message = "; ".join([*errors, f"could not reach the cluster: {exc.message}"])[:2000]
                raise await self._failed(run, pool_id, message, now, watch=True) from exc
            reach = credentials_client(admin)
            if cluster.claimed_at is None:  # a created cluster is claimed once, before its node pools
                try:
                    async with credentials_client(admin) as client:
                        await run.fence()
                        await take_claim(client, pool_id, await self.k.deployment())
                except ComputeError as exc:
                    raise await self._failed(run, pool_id, f"could not claim the cluster: {_why(exc)}", now) from exc
        if cluster.claimed_at is None:
            await self._claimed(run, cluster.id, now)
        ran: Ran | None = None
        unreached: str | None = None
        try:
            async with reach as client:
                ctx = StepContext(
                    self.k, run, client, driver, account, cluster, cluster.provider_cluster_id, tenant_id, pool_id,
                    now, agent, node_pools=node_pools, shrinks=shrinks, booked_nodes=booked_nodes,
                )  # fmt: skip
                ran = await run_steps(STEPS, ctx)
        except ComputeError as exc:
            unreached = f"could not reach the cluster: {exc.message}"
        if ran is None:  # no step ran: each is skipped for the reason
            ran = Ran(skipped(STEP_NAMES, unreached or "the cluster was not reached"), Update())
        seen = ran.update.seen
        errors = [*errors, *ran.errors, *([unreached] if unreached else [])]
        delay = ran.requeue(WAIT_SECONDS if unreached and cluster.upgrade is not None else WATCH_SECONDS)
        retry: TemporaryError | None = None
        if errors:  # the steps' errors: the engine counts them and retries (a step that carries on, sooner)
            message = "; ".join(errors)[:2000]
            retry = TemporaryError(message, delay=delay)
            found = Found("error", message, seen, run.retry_at(retry), ran.results)
        else:
            state = "ready" if ran.update.applied else "provisioning"
            found = Found(state, "; ".join(ran.waiting)[:2000] or None, seen, conditions=ran.results)
        if await save_found(self.k.feed, run, pool_id, found, now) and settling:
            await self._look_again(run, cluster.id, now)
        if retry is not None:
            raise retry
        return Outcome.requeue(delay)

    async def _failed(
        self, run: RunContext, pool_id: str, message: str, now: datetime, *, watch: bool = False
    ) -> TemporaryError:
        """Save the substrate as `error` with `message`; returns the error for the caller to raise,
        so the engine counts the failure and retries it: on the 2-minute `adopt` schedule, or as
        soon as a settled substrate looks again (`watch`)."""
        error = (
            TemporaryError(message, delay=WATCH_SECONDS)
            if watch
            else TemporaryError(message, schedule=ADOPT_RETRY.name)
        )
        found = Found("error", message, next_attempt_at=run.retry_at(error), conditions=skipped(STEP_NAMES, message))
        await save_found(self.k.feed, run, pool_id, found, now)
        return error

    async def _claiming(self, run: RunContext, cluster_id: str, now: datetime) -> None:
        """Record that this substrate sets out to claim the adopted cluster: from now on its teardown
        looks in the cluster for a claim naming the pool (and the identity made after it)."""
        async with self.k.db.transaction() as session:
            row = await session.get(ClusterRow, cluster_id, with_for_update=True)
            if row is None or row.claiming_at is not None:
                return
            await run.guard(session)
            row.claiming_at = now

    async def _claimed(self, run: RunContext, cluster_id: str, now: datetime) -> None:
        """The in-cluster claim is held: record it, and let the clusters reconciler make the node pools."""
        async with self.k.db.transaction() as session:
            row = await session.get(ClusterRow, cluster_id, with_for_update=True)
            if row is None or row.claimed_at is not None:
                return
            await run.guard(session)
            row.claimed_at = now
            await enqueue(session, kind=CLUSTER_KIND, key=cluster_id, now=now)
        self.k.wake()

    async def _look_again(self, run: RunContext, cluster_id: str, now: datetime) -> None:
        """Nodes came or went while a node pool is still provisioning or resizing: the provider's
        operation moved, so the clusters reconciler reads it now rather than at its polling estimate,
        and the node pool's state read says what the provider says."""
        async with self.k.db.transaction() as session:
            await run.guard(session)
            await enqueue(session, kind=CLUSTER_KIND, key=cluster_id, now=now)
        self.k.wake()


async def wake_waiting_for_agent(k: KubernetesContext) -> int:
    """Queue now every substrate in error for want of an agent; returns how many."""
    now = k.clock.now()
    async with k.db.transaction() as session:
        waiting = list(
            await session.scalars(
                select(SubstrateRow.pool_id).where(SubstrateRow.state == "error", SubstrateRow.message == AGENT_MISSING)
            )
        )
        for pool_id in waiting:
            await enqueue(session, kind=SUBSTRATE_KIND, key=pool_id, now=now)
    if waiting:
        k.wake()
    return len(waiting)


def _pending_shrinks(desired: DesiredSubstrate, node_pools: list[NodePoolRow]) -> tuple[PendingShrink, ...]:
    """The fixed flavors whose document asks for fewer Nodes than their row (held back) records."""
    rows = {p.name: p for p in node_pools}
    pending = []
    for flavor in desired.flavors:
        spec, row = flavor.spec, rows.get(flavor.spec.name)
        if row is not None and held_back(row, spec.node_count, spec.autoscaling):
            pending.append(PendingShrink(flavor.flavor, row.id, row.name, spec.node_count))
    return tuple(pending)


def _why(error: ComputeError) -> str:
    """The error's message, led by its reason when it has one (`claimedElsewhere: ...`)."""
    return f"{error.reason}: {error.message}" if error.reason else error.message
