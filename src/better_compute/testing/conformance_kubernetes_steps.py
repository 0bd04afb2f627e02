"""What the Kubernetes conformance cases share: the specs they ask for, the clusters they clean up, and how they
wait for the provider and retry what it answers UNAVAILABLE."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar

from better_compute.core.conformance import check, fail, require
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NodePoolSpec,
    NodePoolState,
    NodePoolStatus,
)

if TYPE_CHECKING:
    from better_compute.testing.conformance_kubernetes import KubernetesSubject, PoolShape

__all__ = [
    "CAPACITY_LABEL",
    "SUBSTRATE_LABEL",
    "case_clusters",
    "cluster_spec",
    "pool_spec",
    "ready_cluster",
    "ready_with",
    "refused",
    "retrying",
    "version_matches",
    "wait_cluster",
    "wait_cluster_gone",
    "wait_pool",
    "wait_pool_gone",
]

T = TypeVar("T")

SUBSTRATE_LABEL = "better-compute.dev/substrate-pool"
CAPACITY_LABEL = "better-compute.dev/capacity"


def cluster_spec(s: KubernetesSubject, *, private_nodes: bool = False) -> ClusterSpec:
    return ClusterSpec(
        name=f"bc-conf-{secrets.token_hex(4)}",
        location=s.location,
        version=s.upgrade_from,
        private_nodes=private_nodes,
        labels={"better-compute-pool": s.pool_id[-12:]},
    )


def pool_spec(
    s: KubernetesSubject, name: str, shape: PoolShape, *, spot: bool = False, node_count: int | None = None
) -> NodePoolSpec:
    labels = {SUBSTRATE_LABEL: s.pool_id}
    if spot:
        labels[CAPACITY_LABEL] = "spot"
    return NodePoolSpec(
        name=name,
        machine_type=shape.machine_type,
        node_count=shape.node_count if node_count is None else node_count,
        labels=labels,
        accelerators=shape.accelerators,
        spot=spot,
        zones=shape.zones,
        disk_gib=shape.disk_gib,
    )


@asynccontextmanager
async def case_clusters(s: KubernetesSubject) -> AsyncIterator[list[str]]:
    """Cluster ids a case made; deleted when the case ends, whatever happened."""
    made: list[str] = []
    try:
        yield made
    finally:
        for cluster_id in made:
            with suppress(ComputeError):
                await s.kubernetes.delete_cluster(s.account(), cluster_id)


async def ready_cluster(s: KubernetesSubject, made: list[str], spec: ClusterSpec | None = None) -> ClusterState:
    spec = spec or cluster_spec(s)
    state = await retrying(s, lambda: s.kubernetes.ensure_cluster(s.account(), spec))
    made.append(state.cluster_id)
    return await wait_cluster(s, state.cluster_id, lambda c: c.status == ClusterStatus.READY, "ready")


async def wait_cluster(
    s: KubernetesSubject, cluster_id: str, done: Callable[[ClusterState], bool], what: str
) -> ClusterState:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_cluster(s.account(), cluster_id)
        state = require(state, f"cluster {cluster_id} disappeared while waiting for it to be {what}")
        check(state.status != ClusterStatus.ERROR, f"cluster {cluster_id} went to error: {state.message}")
        if done(state):
            return state
        check(
            waited < s.patience_seconds,
            f"cluster {cluster_id} not {what} after {waited:.0f} s (status {state.status}: {state.message})",
        )
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def wait_cluster_gone(s: KubernetesSubject, cluster_id: str) -> None:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_cluster(s.account(), cluster_id)
        if state is None or state.status == ClusterStatus.DELETED:
            return
        check(waited < s.patience_seconds, f"cluster {cluster_id} still {state.status} after {waited:.0f} s")
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def wait_pool(
    s: KubernetesSubject, cluster_id: str, name: str, done: Callable[[NodePoolState], bool], what: str
) -> NodePoolState:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_node_pool(s.account(), cluster_id, name)
        state = require(state, f"node pool {name} of cluster {cluster_id} is missing while waiting for {what}")
        check(state.status != NodePoolStatus.ERROR, f"node pool {name} went to error: {state.message}")
        if done(state):
            return state
        check(
            waited < s.patience_seconds,
            f"node pool {name} not {what} after {waited:.0f} s (status {state.status}, {state.node_count} nodes)",
        )
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def wait_pool_gone(s: KubernetesSubject, cluster_id: str, name: str) -> None:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_node_pool(s.account(), cluster_id, name)
        if state is None or state.status == NodePoolStatus.DELETED:
            return
        check(waited < s.patience_seconds, f"node pool {name} still {state.status} after {waited:.0f} s")
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


def ready_with(count: int) -> Callable[[NodePoolState], bool]:
    return lambda p: p.status == NodePoolStatus.READY and p.node_count == count


async def retrying(s: KubernetesSubject, call: Callable[[], Awaitable[T]]) -> T:
    """A change the provider answers UNAVAILABLE (busy, throttled) is tried again after its retry_after,
    as the reconcile engine would, for at most `patience_seconds`."""
    waited = 0.0
    while True:
        try:
            return await call()
        except ComputeError as exc:
            if exc.code != ErrorCode.UNAVAILABLE or waited >= s.patience_seconds:
                raise
            delay = exc.retry_after or s.poll_seconds
            await s.wait(delay)
            waited += delay


async def refused(call: Awaitable[Any], code: ErrorCode | None, what: str) -> ComputeError:
    """Await `call`, which must raise ComputeError (of `code` when given)."""
    try:
        await call
    except ComputeError as exc:
        check(code is None or exc.code == code, f"{what} was refused with {exc.code}, not {code}: {exc.message}")
        return exc
    fail(f"{what} was accepted; it must be refused" + (f" with {code}" if code else ""))


def version_matches(actual: str, wanted: str) -> bool:
    """A provider may answer a fuller version than asked (1.31 -> 1.31.2-gke.1)."""
    return actual == wanted or actual.startswith((wanted + ".", wanted + "-"))
