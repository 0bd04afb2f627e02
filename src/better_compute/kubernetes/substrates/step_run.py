"""What the steps that take machines away (shrink_step, replace_step) reach, and the pool nodes they weigh."""

from __future__ import annotations

from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node as KubeNode

from better_compute.compute import Node, active_on_pools, list_nodes
from better_compute.engine import RunContext
from better_compute.kubernetes.cluster_access.kube_api import missing_ok
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import LEAVING_ANNOTATION
from better_compute.kubernetes.provider import ProviderKubernetes
from better_compute.kubernetes.substrates.nodes_step import ListedNode
from better_compute.vps.provider import ProviderAccount

__all__ = ["Member", "StepRun", "mark", "members"]

Member = tuple[Node, int, int]
"""A live pool node with its active bookings: (the node, how many, how many GPUs they hold)."""


@dataclass(frozen=True, slots=True)
class StepRun:
    """The run, the cluster (as this run's client) and the provider."""

    k: KubernetesContext
    run: RunContext
    client: AsyncClient
    driver: ProviderKubernetes
    account: ProviderAccount
    cluster_id: str
    tenant_id: str
    pool_id: str


async def members(s: StepRun) -> dict[str, Member]:
    """The live pool node on each Kubernetes Node, by the Node's name, with its active bookings.

    A retired node is left out: on GKE a machine recreated under its name has a new pool node of the
    same Node name, and the retired one must not stand for it."""
    async with s.k.db.session() as session:
        nodes = await list_nodes(session, tenant_id=s.tenant_id, pool_id=s.pool_id)
        bookings = await active_on_pools(session, [s.pool_id])
    held: dict[str, list[int]] = {}
    for reservation in bookings:
        held.setdefault(reservation.node_id, []).append(reservation.gpu_count)
    return {
        name: (node, len(held.get(node.id, [])), sum(held.get(node.id, [])))
        for node in nodes
        if (name := node.kubernetes_node_name) is not None and node.state != "retired"
    }


async def mark(client: AsyncClient, nodes: list[ListedNode], how: str) -> None:
    """Cordon and mark the Nodes (`spec.unschedulable`, `LEAVING_ANNOTATION`: how far a step took them),
    skipping those already marked so."""
    for node in nodes:
        if node.leaving == how:
            continue
        body = {"metadata": {"annotations": {LEAVING_ANNOTATION: how}}, "spec": {"unschedulable": True}}
        await missing_ok(f"cordoning Node {node.name}", client.patch(KubeNode, node.name, body))
