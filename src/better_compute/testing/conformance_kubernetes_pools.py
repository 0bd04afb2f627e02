"""The Kubernetes conformance cases about node pools: made, read back and resized in place, never reshaped, and
of zero nodes where the provider allows it."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from better_compute.core.conformance import check, require
from better_compute.core.errors import ErrorCode
from better_compute.kubernetes.provider import NodePoolSpec, NodePoolState
from better_compute.testing.conformance_kubernetes_steps import (
    case_clusters,
    pool_spec,
    ready_cluster,
    ready_with,
    refused,
    retrying,
    wait_pool,
)

if TYPE_CHECKING:
    from better_compute.testing.conformance_kubernetes import KubernetesSubject

__all__ = ["check_pool", "node_pool_shape", "node_pools", "zero_nodes"]


def check_pool(state: NodePoolState, spec: NodePoolSpec) -> None:
    check(state.name == spec.name, f"node pool {spec.name} reads back as {state.name!r}")
    check(
        state.machine_type == spec.machine_type,
        f"node pool {spec.name} has machine type {state.machine_type!r}, not {spec.machine_type!r}",
    )
    missing = {k: v for k, v in spec.labels.items() if state.labels.get(k) != v}
    check(not missing, f"node pool {spec.name} lacks the labels {missing}")
    check(state.spot == spec.spot, f"node pool {spec.name} reads spot={state.spot}, asked {spec.spot}")
    check(
        state.accelerators == spec.accelerators,
        f"node pool {spec.name} reads accelerators {state.accelerators}, asked {spec.accelerators}",
    )


async def node_pools(s: KubernetesSubject) -> None:
    k = s.kubernetes
    check(s.gpu_node_pool.accelerators is not None, "the subject's gpu_node_pool has no accelerators")
    async with case_clusters(s) as made:
        cluster = await ready_cluster(s, made)
        cid = cluster.cluster_id
        gpu = pool_spec(s, "gpu", s.gpu_node_pool)
        specs = [gpu]
        await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, gpu))
        retried = await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, gpu))
        check(retried.name == gpu.name, f"a retried ensure_node_pool answered node pool {retried.name!r}")
        spot = pool_spec(s, "spot", s.node_pool, spot=True)
        if s.spot:
            await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, spot))
            specs.append(spot)
        else:
            await refused(k.ensure_node_pool(s.account(), cid, spot), None, "a Spot node pool (spot is false)")
        for spec in specs:
            state = await wait_pool(s, cid, spec.name, ready_with(spec.node_count), f"ready with {spec.node_count}")
            check_pool(state, spec)
        listed = require(await k.get_cluster(s.account(), cid), "the cluster is gone")
        missing_pools = {spec.name for spec in specs} - set(listed.node_pools)
        check(not missing_pools, f"the cluster does not list its node pools {sorted(missing_pools)}")
        for spec in specs:
            bigger = spec.node_count + 1
            resized = await retrying(s, partial(k.resize_node_pool, s.account(), cid, spec.name, bigger))
            check(resized.name == spec.name, f"resize_node_pool answered node pool {resized.name!r}")
            state = await wait_pool(s, cid, spec.name, ready_with(bigger), f"resized to {bigger}")
            check_pool(state, spec)
            settled = await retrying(s, partial(k.ensure_node_pool, s.account(), cid, replace(spec, node_count=bigger)))
            check(settled.name == spec.name, "ensure_node_pool after a resize answered another node pool")


async def node_pool_shape(s: KubernetesSubject) -> None:
    k = s.kubernetes
    check(
        s.node_pool.machine_type != s.gpu_node_pool.machine_type,
        "node_pool and gpu_node_pool have the same machine type; the case needs two",
    )
    async with case_clusters(s) as made:
        cluster = await ready_cluster(s, made)
        cid = cluster.cluster_id
        spec = pool_spec(s, "shape", s.node_pool)
        await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, spec))
        before = await wait_pool(s, cid, spec.name, ready_with(spec.node_count), "ready")
        reshaped = replace(spec, machine_type=s.gpu_node_pool.machine_type, accelerators=s.gpu_node_pool.accelerators)
        await refused(
            k.ensure_node_pool(s.account(), cid, reshaped),
            ErrorCode.INVALID_STATE,
            f"ensure_node_pool changing machine type {spec.machine_type} -> {reshaped.machine_type}",
        )
        after = require(
            await k.get_node_pool(s.account(), cid, spec.name), "the node pool is gone after a refused change of shape"
        )
        check(
            after.machine_type == before.machine_type,
            f"the node pool changed shape in place: machine type {before.machine_type} -> {after.machine_type}",
        )


async def zero_nodes(s: KubernetesSubject) -> None:
    k = s.kubernetes
    async with case_clusters(s) as made:
        cluster = await ready_cluster(s, made)
        cid = cluster.cluster_id
        empty = pool_spec(s, "empty", s.node_pool, node_count=0)
        if not s.zero_nodes:
            await refused(
                k.ensure_node_pool(s.account(), cid, empty), ErrorCode.INVALID_INPUT, "a fixed-size pool of 0 nodes"
            )
            check(
                await k.get_node_pool(s.account(), cid, empty.name) is None,
                "a refused node pool of 0 nodes exists at the provider",
            )
            return
        await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, empty))
        await wait_pool(s, cid, empty.name, ready_with(0), "ready with 0 nodes")
