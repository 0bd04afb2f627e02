"""The kubelet simulator: Nodes come and go through its API, pods run on them.

`add_node` registers a Node (labels, capacity, taints, Ready condition) as a
real kubelet does; `remove_node` is a node vanishing (Spot reclaim, scale-down):
its Node object goes and the pod GC deletes its pods. `set_ready(False)` is a
kubelet that stops reporting. For every pod bound to one of its nodes the
simulator resolves the containers' env and files, then runs the pod runtime
hook once per container (init containers one after another, then the rest
concurrently) as named tasks, and writes the pod's status as the kubelet would:
Pending, ErrImagePull and ImagePullBackOff (a failed pull is tried again after the kubelet's image
back-off: kubelet_pulls.py), CreateContainerConfigError, Running, Succeeded, Failed.
A container that fails (init or not) is started again after the kubelet's
CrashLoopBackOff, 10 s doubling up to 5 minutes, unless the restartPolicy is
Never. A GPU node (`add_node(gpus=NodeGpus(...))`) has GPUs, a driver and a
container runtime (testing/kube/gpus.py): a container that requests a device
plugin's resource gets devices through the plugin's Allocate (testing/kube/
allocation.py), and every container is started with the GPUs the runtime would
give it (`PodRun.gpus`, `gpus_seen`). `programs` run a node's own software for
pods of known images (a provider's device plugin or driver installer) instead of
the pod runtime hook, and `start_host_plugin` runs one outside Kubernetes, as a
node image's systemd service does. One difference from a real kubelet: a container that exits 0 under
restartPolicy Always stays Completed instead of being started again.

Its parts: kubelet_state.py (what it keeps), kubelet_nodes.py (a Node's life), kubelet_devices.py (GPUs,
device plugins and their Allocate), kubelet_pulls.py (image pulls and their back-off) and kubelet_runs.py (a started
pod's containers); this module starts pods.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from better_compute.testing.kube.kubelet_nodes import NodeLifecycle
from better_compute.testing.kube.kubelet_pulls import ImagePulls
from better_compute.testing.kube.kubelet_runs import idle
from better_compute.testing.kube.podstatus import with_readiness
from better_compute.testing.kube.runtime import UnresolvedReference, resolve_container

__all__ = ["KubeletSimulator"]


class KubeletSimulator(ImagePulls, NodeLifecycle):
    """The kubelet of every simulated Node of a cluster; `sync` starts the pods bound to them."""

    def sync(self) -> None:
        """Bring pods on simulated nodes in line with the store (called by `settle`)."""
        pods_rt = self._cluster.resource("v1", "Pod")
        present: set[str] = set()
        ready_nodes: dict[str, bool] = {}
        now = self._now()
        for pod in list(self._cluster.store.items(pods_rt)):
            node_name = pod.get("spec", {}).get("nodeName")
            uid = pod["metadata"]["uid"]
            if node_name not in self._nodes or "deletionTimestamp" in pod["metadata"]:
                continue
            present.add(uid)
            if node_name not in ready_nodes:
                ready_nodes[node_name] = self._node_ready(node_name)
            ready = ready_nodes[node_name]
            if uid not in self._started:
                if ready and self._blocked.get(uid) != self._blocked_key(pod["metadata"].get("resourceVersion")):
                    self._start(pod, node_name)
            else:
                readiness = with_readiness(pod.get("status") or {}, ready, now)
                if readiness is not None:
                    self._set_status(pod, readiness)
        for uid in [u for u in self._started if u not in present]:
            task = self._started.pop(uid)
            if task is not None:
                task.cancel()
            for state in self._nodes.values():
                state.allocated.pop(uid, None)
        for uid in [u for u in self._blocked if u not in present]:
            del self._blocked[uid]
        self._forget_pulls(present)
        for key in [k for k in self.logs if k[0] not in present]:
            del self.logs[key]

    def _start(self, live: dict[str, Any], node_name: str) -> None:
        """Try to start the pod: `live` is the stored pod (read only); it is copied once it starts."""
        uid = live["metadata"]["uid"]
        if not self._pulled(live, node_name):
            if uid not in self._pull_workers and self._next_pull_sync(uid) is not None:
                meta = live["metadata"]
                self._pull_workers[uid] = asyncio.get_running_loop().create_task(
                    self._pull_again(uid, meta["namespace"], meta["name"]), name=f"kubelet-pull:{meta['name']}"
                )
            return
        self._next_pod_ip += 1
        pod_ip = f"10.244.{self._next_pod_ip // 250}.{self._next_pod_ip % 250 + 2}"
        view = {**live, "status": {**(live.get("status") or {}), "podIP": pod_ip}}  # what the containers see
        spec = live.get("spec", {})
        try:
            inits = [resolve_container(self._cluster, view, c, init=True) for c in spec.get("initContainers") or []]
            mains = [resolve_container(self._cluster, view, c, init=False) for c in spec.get("containers") or []]
        except UnresolvedReference as exc:
            self._waiting(live, node_name, exc.reason, str(exc))
            return
        self._blocked.pop(uid, None)
        pod = copy.deepcopy(view)
        hook = self.pod_runtime
        if hook is None and (
            self._nodes[node_name].gpus is not None or any(self._program(c, idle) is not idle for c in inits + mains)
        ):
            hook = idle  # a GPU node's devices and a node's own software work even where no pod runtime is set
        if hook is None:
            self._started[uid] = None
            self._running(pod, node_name, pod_ip, inits, mains)
            return
        name = f"kubelet:{node_name}/{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self._started[uid] = asyncio.get_running_loop().create_task(
            self._run(pod, node_name, pod_ip, inits, mains, hook), name=name
        )

    async def _pull_again(self, uid: str, namespace: str, name: str) -> None:
        """The pod worker of a pod whose pull failed: sync it when its back-off shows and when it ends,
        until it starts or goes."""
        try:
            while (wait := self._next_pull_sync(uid)) is not None:
                await self._cluster.clock.sleep(wait)
                live = self._cluster.store.peek(self._cluster.resource("v1", "Pod"), namespace, name)
                if live is None or live["metadata"]["uid"] != uid or "deletionTimestamp" in live["metadata"]:
                    return
                node_name = live.get("spec", {}).get("nodeName")
                if uid in self._started or node_name not in self._nodes:
                    return
                if self._node_ready(node_name):
                    self._start(live, node_name)
                    self._cluster.settle(everything=False)
        finally:
            if self._pull_workers.get(uid) is asyncio.current_task():
                del self._pull_workers[uid]
