"""A simulated Node's life: registered as a starting kubelet does, Ready or not, upgraded in place, and gone (its
Node object deleted, its plugins and files closed)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

from better_compute.bcd.simnvml import SimulatedNvml
from better_compute.testing.kube.gpus import NodeGpus
from better_compute.testing.kube.kubelet_state import MANAGER, KubeletNode, KubeletState
from better_compute.testing.kube.nodestatus import node_status, ready_condition
from better_compute.testing.kube.status import KubeError

__all__ = ["NodeLifecycle"]


def _taint(taint: Any) -> dict[str, str]:
    if isinstance(taint, Mapping):
        return {k: str(v) for k, v in taint.items() if v is not None}
    return {"key": taint.key, "value": taint.value, "effect": taint.effect}


class NodeLifecycle(KubeletState):
    """Nodes registered, made Ready or not, upgraded in place, given resources, and gone."""

    async def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] | None = None,
        taints: Iterable[Any] = (),
        ready: bool = True,
        *,
        provider_id: str | None = None,
        version: str | None = None,
        gpus: NodeGpus | None = None,
    ) -> dict[str, Any]:
        """Register a Node the way a starting kubelet does, and return it. `version` is the kubelet's
        Kubernetes version (the control plane's when not given). A Node's `nvidia.com/gpu` comes from
        the device plugin that registers for it, not from `capacity`."""
        if name in self._nodes:
            raise ValueError(f"node {name} is already registered")
        index = self._next_node
        self._next_node += 1
        nvml = SimulatedNvml.from_spec(f"{gpus.count}x{gpus.model}", name) if gpus is not None else None
        self._nodes[name] = KubeletNode(index, gpus, nvml)
        resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        resources.update({k: str(v) for k, v in (capacity or {}).items()})
        spec: dict[str, Any] = {}
        taint_list = [_taint(t) for t in taints]
        if taint_list:
            spec["taints"] = taint_list
        if provider_id:
            spec["providerID"] = provider_id
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64",
                    **dict(labels or {}),
                },
            },
            "spec": spec,
            "status": node_status(
                name, index, resources, ready, version=version or self._cluster.version, now=self._now()
            ),
        }
        nodes = self._cluster.resource("v1", "Node")
        created = self._cluster.ops.create(nodes, "", node, manager=MANAGER)
        self._cluster.settle(everything=False)
        return created

    async def remove_node(self, name: str) -> None:
        """The machine is gone: its Node object and, through pod GC, its pods."""
        state = self._nodes.pop(name, None)
        nodes = self._cluster.resource("v1", "Node")
        with contextlib.suppress(KubeError):
            self._cluster.ops.delete(nodes, "", name)
        self._cluster.settle(everything=False)
        if state is not None:
            await self._close_node(state)

    async def set_ready(self, name: str, ready: bool) -> None:
        """Flip the Node's Ready condition (False: a kubelet that stopped reporting)."""
        nodes = self._cluster.resource("v1", "Node")
        node = self._cluster.ops.get(nodes, "", name)
        node["status"]["conditions"] = [
            ready_condition(ready, self._now()) if c.get("type") == "Ready" else c for c in node["status"]["conditions"]
        ]
        self._cluster.ops.update(nodes, "", name, node, manager=MANAGER, subresource="status")
        self._cluster.settle(everything=False)

    async def upgrade_node(self, name: str, version: str) -> None:
        """The machine behind the Node is upgraded in place: its kubelet stops reporting, comes back
        at `version` (`status.nodeInfo.kubeletVersion`), and the Node is Ready again."""
        await self.set_ready(name, False)
        nodes = self._cluster.resource("v1", "Node")
        node = self._cluster.ops.get(nodes, "", name)
        info = node["status"].setdefault("nodeInfo", {})
        info["kubeletVersion"] = info["kubeProxyVersion"] = f"v{version}"
        self._cluster.ops.update(nodes, "", name, node, manager=MANAGER, subresource="status")
        await self.set_ready(name, True)

    def set_node_resources(self, name: str, resource: str, capacity: int, allocatable: int) -> None:
        """Advertise an extended resource (what a registered device plugin reports)."""
        nodes = self._cluster.resource("v1", "Node")
        node = self._cluster.store.peek(nodes, "", name)
        if node is None:
            return
        status = copy.deepcopy(node["status"])  # a status write: the rest of `node` is only read
        status.setdefault("capacity", {})[resource] = str(capacity)
        status.setdefault("allocatable", {})[resource] = str(allocatable)
        self._cluster.ops.update(nodes, "", name, {**node, "status": status}, manager=MANAGER, subresource="status")
        self._cluster.settle(everything=False)

    async def close(self) -> None:
        tasks = [t for t in self._started.values() if t is not None] + list(self._pull_workers.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._started.clear()
        self._pull_workers.clear()
        for state in list(self._nodes.values()):
            await self._close_node(state)
        self._nodes.clear()

    async def _close_node(self, state: KubeletNode) -> None:
        for task in state.host_plugins:
            task.cancel()
        for task in state.host_plugins:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if state.host_root is not None:
            shutil.rmtree(state.host_root, ignore_errors=True)
        if state.registration is not None:
            server = await state.registration
            await server.stop()
            shutil.rmtree(server.directory, ignore_errors=True)

    def _node_ready(self, name: str) -> bool:
        node = self._cluster.store.peek(self._cluster.resource("v1", "Node"), "", name)
        if node is None:
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
        )
