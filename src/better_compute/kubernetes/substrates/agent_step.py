"""Step: apply bcd (Namespace, ResourceQuota, ConfigMap, DaemonSet, GKE's driver installer) and, at
teardown, remove it (with the join reviewer's ServiceAccount, ClusterRole and binding, which join checks make).

The Namespace is created only when absent: one that is there (an adopted cluster's owner may
run their own `bc-system`) is left as it is, never labelled ours, so teardown never deletes it.
The other objects are server-side applied by one fixed field manager; `force` takes
their fields back from anyone who edited them, since these objects are the substrate's.
Each is applied only when the cluster's copy differs from it (applied.py): a converged
substrate's run reads them, one list a kind, and writes nothing.
Removal deletes only objects that carry the substrate's label, whatever their name, and
treats what is already gone as removed.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Namespace, ResourceQuota, Secret, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.cluster_access.kube_api import FIELD_MANAGER, create_if_absent, kube_call, missing_ok
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import GpuNode
from better_compute.kubernetes.substrates.applied import holds, stamped
from better_compute.kubernetes.substrates.gpu_driver import gpu_access
from better_compute.kubernetes.substrates.manifests import NAMESPACE, bcd_objects
from better_compute.kubernetes.substrates.steps import StepContext, StepResult, Update

__all__ = ["BCD_CLUSTER_KINDS", "BCD_KINDS", "AgentStep", "apply_bcd", "remove_bcd"]

BCD_KINDS: tuple[Any, ...] = (DaemonSet, Secret, ConfigMap, ResourceQuota, ServiceAccount)
"""The kinds of bcd's objects in its namespace (the join reviewer's ServiceAccount among them)."""
BCD_CLUSTER_KINDS: tuple[Any, ...] = (ClusterRoleBinding, ClusterRole)
"""The cluster-wide kinds of bcd's objects: the join reviewer's (kubernetes/cluster_access/join_reviewer.py)."""


async def apply_bcd(client: AsyncClient, pool_id: str, agent: SubstrateAgent, gpu_node: GpuNode) -> int:
    """bcd's objects fitted to the provider's GPU node, GKE's driver installer included where it has no
    NVIDIA container runtime, each applied only where the cluster's differs (applied.py); returns how many
    were applied. What is there is read with one list a kind; when nothing differs, nothing is written
    (and the Namespace, which holds them, is not read either)."""
    namespace, *desired = gpu_access(bcd_objects(pool_id, agent, gpu_node), gpu_node)
    manifests = [stamped(m) for m in desired]
    live = await _live(client, pool_id, {m["kind"] for m in manifests})
    changed = [m for m in manifests if not holds(live.get((m["kind"], m["metadata"]["name"])), m)]
    if changed:
        await create_if_absent(client, namespace)  # an owner's own bc-system stays theirs: never labelled ours
    for manifest in changed:
        obj = codecs.from_dict(manifest)
        what = f"applying {manifest['kind']} {manifest['metadata']['name']}"
        await kube_call(what, client.apply(obj, field_manager=FIELD_MANAGER, force=True))
    return len(changed)


async def _live(client: AsyncClient, pool_id: str, kinds: set[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> the object as the cluster has it, for bcd's objects of `kinds` in its namespace."""
    selector: dict[str, Any] = {SUBSTRATE_POOL_LABEL: pool_id}

    async def listed(kind: Any) -> list[Any]:
        return [obj async for obj in client.list(kind, namespace=NAMESPACE, labels=selector)]

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for kind in BCD_KINDS:
        if kind.__name__ in kinds:
            for obj in await kube_call(f"reading {kind.__name__}s", listed(kind)):
                if obj.metadata and obj.metadata.name:
                    found[(kind.__name__, obj.metadata.name)] = obj.to_dict()
    return found


async def remove_bcd(client: AsyncClient, pool_id: str) -> int:
    """Delete every object of the substrate (labelled with its pool id); returns how many were left to delete."""
    selector: dict[str, Any] = {SUBSTRATE_POOL_LABEL: pool_id}
    found = 0
    for kind in BCD_KINDS:
        listed = [o async for o in client.list(kind, namespace=NAMESPACE, labels=selector)]
        for obj in listed:
            name = obj.metadata.name if obj.metadata and obj.metadata.name else None
            if name:
                found += 1
                await missing_ok(f"deleting {kind.__name__} {name}", client.delete(kind, name, namespace=NAMESPACE))
    for cluster_kind in BCD_CLUSTER_KINDS:
        async for obj in client.list(cluster_kind, labels=selector):
            name = obj.metadata.name if obj.metadata and obj.metadata.name else None
            if name:
                found += 1
                await missing_ok(f"deleting {cluster_kind.__name__} {name}", client.delete(cluster_kind, name))
    async for namespace in client.list(Namespace, labels=selector):
        name = namespace.metadata.name if namespace.metadata and namespace.metadata.name else None
        if name:
            found += 1
            await missing_ok(f"deleting Namespace {name}", client.delete(Namespace, name))
    return found


class AgentStep:
    """The `bcd` condition: bcd's objects applied; with no error anywhere the substrate is then `ready`."""

    name = "bcd"
    needs: tuple[str, ...] = ()

    async def run(self, ctx: StepContext) -> StepResult:
        try:
            await ctx.run.fence()
            await apply_bcd(ctx.client, ctx.pool_id, ctx.agent, ctx.driver.vocabulary.gpu_node)
        except ComputeError as exc:
            return StepResult(self.name, "error", exc.message)
        return StepResult(self.name, "ok", "applied", update=Update(applied=True))
