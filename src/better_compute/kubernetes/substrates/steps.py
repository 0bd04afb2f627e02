"""The steps of a substrate run: one contract, one loop.

Each step owns one condition. It takes the run's `StepContext` and returns a `StepResult`: its
condition's status (`ok`, `waiting`, `error`; the loop adds `skipped`), a message, how soon it wants
the substrate looked at again (None: no sooner than a settled one), and a typed `Update` of what
the run saves at its end. A step's writes that must happen mid-run (a fenced provider or cluster
call, the rows it retires or cordons under the lease) stay in the step; what the run records of
itself (the Nodes seen, the state and message, the conditions) is saved once, by the reconciler,
in one transaction guarded by the run's lease (records.save_found).

`run_steps` runs the steps in order. A step whose prerequisite (`needs`) did not succeed is
`skipped`, naming it; a step that fails does not stop the ones that do not need it. Their errors
are gathered in order, and the soonest requeue any step asks for wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from better_compute.core.errors import ComputeError

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from better_compute.engine import RunContext
    from better_compute.kubernetes.agent import SubstrateAgent
    from better_compute.kubernetes.context import KubernetesContext
    from better_compute.kubernetes.policy import BookedNodes
    from better_compute.kubernetes.provider import ProviderKubernetes
    from better_compute.kubernetes.substrates.nodes_step import ListedNode, NodesSeen
    from better_compute.kubernetes.substrates.shrink_step import PendingShrink
    from better_compute.kubernetes.tables import ClusterRow
    from better_compute.vps.provider import ProviderAccount

__all__ = [
    "SOON",
    "Ran",
    "Status",
    "Step",
    "StepContext",
    "StepResult",
    "Update",
    "conditions_json",
    "gathered",
    "run_steps",
    "skipped",
]

Status = Literal["ok", "waiting", "error", "skipped"]

SOON = 30.0
"""The requeue a step asks for while it carries something on (a drain, a shrink or replacement that waits)."""


@dataclass(frozen=True, slots=True)
class Update:
    """What a step hands the run to save at its end (and to the steps after it)."""

    listed: tuple[ListedNode, ...] | None = None
    """The substrate's Nodes as listed this run (the nodes step)."""
    seen: NodesSeen | None = None
    """The Nodes listed, joined and waiting, for the row's counts and the join warning (the nodes step)."""
    applied: bool = False
    """bcd is applied: with no error anywhere the substrate is `ready` (the agent step)."""

    def then(self, later: Update) -> Update:
        """This update, with what a later step set laid over it."""
        return Update(
            listed=later.listed if later.listed is not None else self.listed,
            seen=later.seen if later.seen is not None else self.seen,
            applied=self.applied or later.applied,
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    """One step's outcome: its condition's status and message, the requeue it asks for, its update."""

    condition: str
    status: Status
    message: str | None = None
    requeue_after: float | None = None
    update: Update = Update()
    in_message: bool = True
    """Whether a waiting step's message is the substrate's message too (an upgrade's progress is the
    upgrade view's, not the substrate's)."""

    @property
    def ok(self) -> bool:
        """The step did its part (a step that waits did too: it is carried on next run)."""
        return self.status in ("ok", "waiting")


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a step reaches: the run (its lease), the cluster (this run's client) and provider, what the
    document asks, and what the steps before it found (`listed`, `seen`)."""

    k: KubernetesContext
    run: RunContext
    client: AsyncClient
    driver: ProviderKubernetes
    account: ProviderAccount
    cluster: ClusterRow
    provider_cluster_id: str
    tenant_id: str
    pool_id: str
    now: datetime
    """The run's time, taken before the Nodes are listed."""
    agent: SubstrateAgent
    flavor_errors: tuple[str, ...] = ()
    node_pools: tuple[str, ...] = ()
    shrinks: tuple[PendingShrink, ...] = ()
    booked_nodes: BookedNodes = "wait"
    listed: tuple[ListedNode, ...] = ()
    seen: NodesSeen | None = None

    def with_update(self, update: Update) -> StepContext:
        return dataclasses.replace(
            self,
            listed=update.listed if update.listed is not None else self.listed,
            seen=update.seen if update.seen is not None else self.seen,
        )


class Step(Protocol):
    """One step of the run: it owns the condition `name`, and runs once the steps it `needs` succeeded."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> tuple[str, ...]: ...

    async def run(self, ctx: StepContext) -> StepResult: ...


@dataclass(frozen=True, slots=True)
class Ran:
    """Every step's result, in order, and their updates laid one over the other."""

    results: tuple[StepResult, ...]
    update: Update

    @property
    def errors(self) -> list[str]:
        return [r.message for r in self.results if r.status == "error" and r.message]

    @property
    def waiting(self) -> list[str]:
        return [r.message for r in self.results if r.status == "waiting" and r.message and r.in_message]

    def requeue(self, default: float) -> float:
        """The soonest requeue a step asked for, else `default`."""
        return min((r.requeue_after for r in self.results if r.requeue_after is not None), default=default)


async def run_steps(steps: Sequence[Step], ctx: StepContext) -> Ran:
    """Run `steps` in order; gather, never short-circuit (a step's unmet prerequisite skips it alone)."""
    results: list[StepResult] = []
    by_name: dict[str, StepResult] = {}
    update = Update()
    for step in steps:
        unmet = [n for n in step.needs if n not in by_name or not by_name[n].ok]
        if unmet:
            result = StepResult(step.name, "skipped", f"needs {', '.join(unmet)}, which did not succeed")
        else:
            try:
                result = await step.run(ctx)
            except ComputeError as exc:  # a call the step did not expect to fail: as the cluster unreached
                result = StepResult(step.name, "error", f"could not reach the cluster: {exc.message}")
        results.append(result)
        by_name[step.name] = result
        update = update.then(result.update)
        ctx = ctx.with_update(result.update)
    return Ran(tuple(results), update)


def gathered(
    name: str, errors: Sequence[str], waiting: Sequence[str], *, busy: bool = False, done: str | None = None
) -> StepResult:
    """A step's result from what it gathered: `error` with any error, else `waiting` with anything that
    waits, else `ok` (saying `done`). It asks to be looked at again soon while anything waits, or when `busy`."""
    requeue = SOON if waiting or busy else None
    if errors:
        return StepResult(name, "error", "; ".join(errors), requeue)
    if waiting:
        return StepResult(name, "waiting", "; ".join(waiting), requeue)
    return StepResult(name, "ok", done, requeue)


def skipped(names: Sequence[str], why: str) -> tuple[StepResult, ...]:
    """Every step's condition when none ran (the cluster not ready or not reached): skipped, saying why."""
    return tuple(StepResult(name, "skipped", why) for name in names)


def conditions_json(
    results: Sequence[StepResult], before: list[dict[str, Any]] | None, now: datetime
) -> list[dict[str, Any]]:
    """The conditions to store: each step's, its `since` kept from `before` while its status holds."""
    was = {c.get("name"): c for c in before or [] if isinstance(c, dict)}
    stored = []
    for r in results:
        prior = was.get(r.condition)
        same = prior is not None and prior.get("status") == r.status and isinstance(prior.get("since"), str)
        since = str(prior["since"]) if same and prior is not None else now.isoformat()
        message = r.message[:500] if r.message else None
        stored.append({"name": r.condition, "status": r.status, "message": message, "since": since})
    return stored
