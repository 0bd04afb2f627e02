"""The kubelet simulator: Nodes come and go through its API, pods run on them.

`add_node` registers a Node (labels, capacity, taints, Ready condition) as a
real kubelet does; `remove_node` is a node vanishing (Spot reclaim, scale-down):
its Node object goes and the pod GC deletes its pods. `set_ready(False)` is a
kubelet that stops reporting. For every pod bound to one of its nodes the
simulator resolves the containers' env and files, then runs the pod runtime
hook once per container (init containers one after another, then the rest
concurrently) as named tasks, and writes the pod's status as the kubelet would:
Pending, ErrImagePull, CreateContainerConfigError, Running, Succeeded, Failed.
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
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fnmatch
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from better_compute.bcd.simnvml import SimulatedNvml
from better_compute.testing.kube.allocation import AdmissionError, allocate, host_mounts, privileged
from better_compute.testing.kube.deviceplugin import RegistrationServer
from better_compute.testing.kube.events import record_event
from better_compute.testing.kube.gpus import (
    RUNTIME_CONFIG,
    ContainerDevices,
    NodeGpus,
    runtime_config_text,
    visible_gpus,
)
from better_compute.testing.kube.nodestatus import node_ip, node_status, ready_condition
from better_compute.testing.kube.podstatus import (
    admission_failed,
    finished_status,
    initializing_status,
    restarted_status,
    running_status,
    waiting_status,
    with_readiness,
)
from better_compute.testing.kube.runtime import (
    ContainerLog,
    ContainerRun,
    NodeRun,
    PodRun,
    PodRuntime,
    UnresolvedReference,
    resolve_container,
)
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import Change

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["KubeletSimulator", "NodeProgram"]

MANAGER = "kubelet"
RESTART_BACKOFF = 10.0
MAX_RESTART_BACKOFF = 300.0
_REFERENCED_KINDS = frozenset({"Secret", "ConfigMap", "ServiceAccount"})
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Blocked:
    """What a pod's failed start depended on: it is retried only once one of these moves."""

    resource_version: str | None
    references: int
    image_pull_failures: frozenset[str]


NodeProgram = Callable[[PodRun, NodeRun], Awaitable[None]]
"""A node's own software, run for a container of a known image (see `KubeletSimulator.programs`)."""


@dataclass
class _Node:
    index: int
    gpus: NodeGpus | None = None
    nvml: SimulatedNvml | None = None
    """The machine's own GPUs as NVML reads them: faults injected here are what its bcd sees, and
    a machine made later under the same name (a reused EKS address, a GKE instance recreated) gets a
    table of its own, so nothing of one test's or one machine's faults reaches another's."""
    registration: asyncio.Task[RegistrationServer] | None = None
    host_root: Path | None = None
    allocated: dict[str, set[str]] = field(default_factory=dict)
    host_plugins: list[asyncio.Task[None]] = field(default_factory=list)
    gpus_changed: asyncio.Event = field(default_factory=asyncio.Event)


def _taint(taint: Any) -> dict[str, str]:
    if isinstance(taint, Mapping):
        return {k: str(v) for k, v in taint.items() if v is not None}
    return {"key": taint.key, "value": taint.value, "effect": taint.effect}


class KubeletSimulator:
    def __init__(self, cluster: KubeCluster) -> None:
        self._cluster = cluster
        self._nodes: dict[str, _Node] = {}
        self._started: dict[str, asyncio.Task[None] | None] = {}
        self._failed_pulls: set[str] = set()
        self._blocked: dict[str, _Blocked] = {}
        self._references = 0
        cluster.store.subscribe(self._note)
        self._next_node = 0
        self._next_pod_ip = 0
        self.pod_runtime: PodRuntime | None = None
        self.image_pull_failures: set[str] = set()
        """Image patterns (fnmatch) whose pulls fail: their pods stay Pending with ErrImagePull."""
        self.programs: dict[str, NodeProgram] = {}
        """Image name (without tag or digest) -> the program its containers run instead of the pod runtime hook."""
        self._seen: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self.logs: dict[tuple[str, str], ContainerLog] = {}
        """(pod uid, container name) -> what the container wrote, while the pod is there (`kubectl logs`)."""

    # the simulator's own API

    @property
    def node_names(self) -> list[str]:
        return sorted(self._nodes)

    def advertised(self, name: str, resource: str = "nvidia.com/gpu") -> list[str]:
        """The healthy device IDs a device plugin on the Node advertises for `resource` now."""
        state = self._nodes.get(name)
        if state is None or state.registration is None or not state.registration.done():
            return []
        plugin = state.registration.result().plugins.get(resource)
        return sorted(d.id for d in plugin.devices if d.health == "Healthy") if plugin is not None else []

    def registered(self, name: str, resource: str = "nvidia.com/gpu") -> str | None:
        """The endpoint (socket name) of the plugin whose registration for `resource` the Node keeps."""
        state = self._nodes.get(name)
        if state is None or state.registration is None or not state.registration.done():
            return None
        plugin = state.registration.result().plugins.get(resource)
        return plugin.endpoint if plugin is not None else None

    def gpus(self, name: str) -> NodeGpus | None:
        """The Node's GPUs (None for a node without any)."""
        state = self._nodes.get(name)
        return state.gpus if state is not None else None

    def gpu_fault(self, name: str, index: int, **faults: Any) -> None:
        """Give GPU `index` of Node `name` a fault its bcd reads through NVML (the stand-in's `inject`:
        `xid=79`, `ecc=2`, `lost=True`, `remap_pending=True`, `slowdown=True`)."""
        self._nvml(name).inject(index, **faults)

    def clear_gpu_fault(self, name: str, index: int) -> None:
        """GPU `index` of Node `name` reads healthy again (bcd's clean period then applies)."""
        self._nvml(name).clear(index)

    def _nvml(self, name: str) -> SimulatedNvml:
        state = self._nodes.get(name)
        if state is None or state.nvml is None:
            raise KeyError(f"Node {name} has no GPUs")
        return state.nvml

    def gpus_seen(self, namespace: str, pod: str, container: str) -> tuple[str, ...] | None:
        """The GPU UUIDs the container was started with (None: not started on a simulated node)."""
        return self._seen.get((namespace, pod, container))

    def host_root(self, name: str) -> Path:
        """The machine's own filesystem (hostPath volumes, the NVIDIA runtime's config.toml), made on first use."""
        state = self._nodes[name]
        if state.host_root is None:
            state.host_root = Path(tempfile.mkdtemp(prefix="knode"))
            if state.gpus is not None and state.gpus.runtime.nvidia_toolkit:
                config = state.host_root / RUNTIME_CONFIG
                config.parent.mkdir(parents=True)
                config.write_text(runtime_config_text(state.gpus.runtime))
        return state.host_root

    def install_driver(self, name: str) -> None:
        """The GPU driver is loaded on the Node: its GPUs exist from now on."""
        state = self._nodes[name]
        if state.gpus is not None and not state.gpus.driver_ready:
            state.gpus.driver_ready = True
            self._gpus_changed(state)

    def gpus_changed(self, name: str) -> asyncio.Event:
        """An event set once the Node's GPUs change from now on (its driver is loaded)."""
        return self._nodes[name].gpus_changed

    async def clock_sleep(self, seconds: float) -> None:
        """Sleep on the cluster's clock (a node program's own pace: a driver's install)."""
        await self._cluster.clock.sleep(seconds)

    def _gpus_changed(self, state: _Node) -> None:
        event, state.gpus_changed = state.gpus_changed, asyncio.Event()
        event.set()

    def start_host_plugin(self, name: str, plugin: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        """Run a device plugin that the node image starts itself (a systemd service), until the node goes
        or the returned task is cancelled (the service stopped)."""
        state = self._nodes[name]
        task = asyncio.get_running_loop().create_task(plugin(), name=f"host-plugin:{name}")
        state.host_plugins.append(task)
        return task

    def host_plugins(self, name: str) -> list[asyncio.Task[None]]:
        """The device plugins the node image started itself (`start_host_plugin`), running or not."""
        return list(self._nodes[name].host_plugins)

    async def device_plugin_socket(self, name: str) -> Path:
        """The Node's kubelet Registration socket (`.../kubelet.sock`), served from first use on.

        Plugins put their own socket in the same directory. It starts lazily so
        that a simulated fleet of thousands of Nodes holds no sockets it never uses.
        """
        state = self._nodes[name]
        if state.registration is None:
            state.registration = asyncio.get_running_loop().create_task(
                self._serve_registration(name), name=f"kubelet-registration:{name}"
            )
        server = await asyncio.shield(state.registration)
        return server.socket_path

    async def _serve_registration(self, name: str) -> RegistrationServer:
        server = RegistrationServer(self._cluster, name, Path(tempfile.mkdtemp(prefix="kdp")))
        await server.start()
        return server

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
        self._nodes[name] = _Node(index, gpus, nvml)
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
        tasks = [t for t in self._started.values() if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._started.clear()
        for state in list(self._nodes.values()):
            await self._close_node(state)
        self._nodes.clear()

    async def _close_node(self, state: _Node) -> None:
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

    # node and pod status

    def _note(self, change: Change) -> None:
        """Count changes to what pods reference (Secrets, ConfigMaps, ServiceAccounts): a pod whose
        start was blocked waits for one of them (or for its own spec) before it is tried again."""
        if change.resource.kind in _REFERENCED_KINDS:
            self._references += 1

    def _blocked_key(self, resource_version: str | None) -> _Blocked:
        return _Blocked(resource_version, self._references, frozenset(self.image_pull_failures))

    def _now(self) -> str:
        return self._cluster.ops.now()

    def _node_ready(self, name: str) -> bool:
        node = self._cluster.store.peek(self._cluster.resource("v1", "Node"), "", name)
        if node is None:
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
        )

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
            self._failed_pulls.discard(uid)
        for key in [k for k in self.logs if k[0] not in present]:
            del self.logs[key]

    def _set_status(self, pod: dict[str, Any], status: dict[str, Any]) -> str | None:
        """Write the pod's status through the status subresource (never touching `pod`); the
        pod's resourceVersion after it (unchanged when the status already was `status`), or None
        when the pod is gone."""
        meta = pod["metadata"]
        if pod.get("status") == status:
            return str(meta["resourceVersion"])
        try:
            written = self._cluster.ops.update(
                self._cluster.resource("v1", "Pod"),
                meta["namespace"],
                meta["name"],
                {**pod, "status": status},
                manager=MANAGER,
                subresource="status",
            )
        except KubeError:
            return None
        return str(written["metadata"]["resourceVersion"])

    def _failing_image(self, pod: dict[str, Any]) -> str | None:
        spec = pod.get("spec", {})
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            image = str(container.get("image", ""))
            if any(fnmatch.fnmatchcase(image, pattern) for pattern in self.image_pull_failures):
                return image
        return None

    def _waiting(self, pod: dict[str, Any], node_name: str, reason: str, message: str) -> None:
        """The pod cannot start yet: say why (once; the status is kept while the reason is), and
        leave it alone until the pod or what it references changes."""
        status = waiting_status(pod, self._host_ip(node_name), reason, message, self._now())
        self._blocked[pod["metadata"]["uid"]] = self._blocked_key(self._set_status(pod, status))

    def _host_ip(self, node_name: str) -> str:
        return node_ip(self._nodes[node_name].index)

    def _start(self, live: dict[str, Any], node_name: str) -> None:
        """Try to start the pod: `live` is the stored pod (read only); it is copied once it starts."""
        uid = live["metadata"]["uid"]
        image = self._failing_image(live)
        if image is not None:
            message = f'Failed to pull image "{image}": failed to resolve reference "{image}": not found'
            self._waiting(live, node_name, "ErrImagePull", message)
            if uid not in self._failed_pulls:
                self._failed_pulls.add(uid)
                self._event(live, node_name, "Failed", message)
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
        self._failed_pulls.discard(uid)
        self._blocked.pop(uid, None)
        pod = copy.deepcopy(view)
        hook = self.pod_runtime
        if hook is None and (
            self._nodes[node_name].gpus is not None or any(self._program(c, _idle) is not _idle for c in inits + mains)
        ):
            hook = _idle  # a GPU node's devices and a node's own software work even where no pod runtime is set
        if hook is None:
            self._started[uid] = None
            self._running(pod, node_name, pod_ip, inits, mains)
            return
        name = f"kubelet:{node_name}/{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self._started[uid] = asyncio.get_running_loop().create_task(
            self._run(pod, node_name, pod_ip, inits, mains, hook), name=name
        )

    async def _node_run(self, node_name: str) -> NodeRun:
        socket = await self.device_plugin_socket(node_name)
        node = self._cluster.store.peek(self._cluster.resource("v1", "Node"), "", node_name) or {}
        return NodeRun(
            name=node_name,
            labels=dict(node.get("metadata", {}).get("labels") or {}),
            capacity=dict(node.get("status", {}).get("capacity") or {}),
            device_plugin_dir=socket.parent,
            host_root=self.host_root(node_name),
            gpus=self._nodes[node_name].gpus,
            nvml=self._nodes[node_name].nvml,
        )

    def _running(
        self, pod: dict[str, Any], node_name: str, pod_ip: str, inits: list[ContainerRun], mains: list[ContainerRun]
    ) -> None:
        self._set_status(pod, running_status(self._host_ip(node_name), pod_ip, inits, mains, self._now()))

    async def _run(
        self,
        pod: dict[str, Any],
        node_name: str,
        pod_ip: str,
        inits: list[ContainerRun],
        mains: list[ContainerRun],
        hook: PodRuntime,
    ) -> None:
        meta = pod["metadata"]
        if node_name not in self._nodes:
            return
        node = await self._node_run(node_name)
        try:
            gpus = await self._devices(pod, node_name, inits + mains)
        except AdmissionError as exc:
            self._set_status(self._live(pod) or pod, admission_failed(exc.reason, str(exc), self._now()))
            self._event(pod, node_name, exc.reason, str(exc))
            return

        def run_of(container: ContainerRun) -> PodRun:
            log = self.logs.setdefault((meta["uid"], container.name), ContainerLog(self._now))
            return PodRun(
                meta["name"], meta["namespace"], meta["uid"], node.name, container, pod, gpus[container.name], log
            )

        restarting = pod.get("spec", {}).get("restartPolicy", "Always") != "Never"
        for index, container in enumerate(inits):
            restarts = 0
            while True:
                status = initializing_status(
                    self._host_ip(node.name), pod_ip, inits, mains, index, self._now(), restarts=restarts
                )
                self._set_status(self._live(pod) or pod, status)
                self._cluster.settle(everything=False)
                try:
                    await self._program(container, hook)(run_of(container), node)
                    break
                except Exception as exc:
                    _stop_if_cancelled(exc)
                    _log.warning("init container %s of pod %s failed: %s", container.name, meta["name"], exc)
                    self._finished(pod, container, exc)
                if not restarting:
                    return
                restarts += 1
                if await self._backed_off(pod, restarts, container) is None:
                    return
        self._running(self._live(pod) or pod, node.name, pod_ip, inits, mains)
        self._cluster.settle(everything=False)
        async with asyncio.TaskGroup() as group:
            for container in mains:
                group.create_task(
                    self._container(
                        pod, container, run_of(container), node, self._program(container, hook), restarting
                    ),
                    name=container.name,
                )

    def _program(self, container: ContainerRun, hook: PodRuntime) -> PodRuntime:
        image = container.image.split("@", 1)[0]
        name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        return self.programs.get(name, hook)

    async def _devices(
        self, pod: dict[str, Any], node_name: str, containers: list[ContainerRun]
    ) -> dict[str, tuple[str, ...]]:
        """Each container's GPUs: devices allocated through their plugins, then what the runtime makes of it."""
        state = self._nodes[node_name]
        meta = pod["metadata"]
        specs = {
            c["name"]: c for c in (pod["spec"].get("initContainers") or []) + (pod["spec"].get("containers") or [])
        }
        registration = await state.registration if state.registration is not None else None
        seen: dict[str, tuple[str, ...]] = {}
        taken = {d for uid, held in state.allocated.items() if uid != meta["uid"] for d in held}
        for container in containers:
            spec = specs.get(container.name, {})
            asked = ContainerDevices(mounts=host_mounts(pod, spec), env=container.env, privileged=privileged(spec))
            if state.gpus is not None:
                asked, held = await allocate(registration, pod, spec, container.env, taken)
                taken |= held
                state.allocated.setdefault(meta["uid"], set()).update(held)
            gpus = visible_gpus(state.gpus, node_name, self.host_root(node_name), asked) if state.gpus else ()
            seen[container.name] = gpus
            self._seen[(meta["namespace"], meta["name"], container.name)] = gpus
        return seen

    async def _container(
        self,
        pod: dict[str, Any],
        container: ContainerRun,
        run: PodRun,
        node: NodeRun,
        hook: PodRuntime,
        restarting: bool,
    ) -> None:
        """Run the container; one that fails is started again after its back-off unless the pod's
        restartPolicy is Never (one that exits 0 stays Completed: see the module's docstring)."""
        restarts = 0
        while True:
            try:
                await hook(run, node)
            except Exception as exc:
                _stop_if_cancelled(exc)
                _log.warning("container %s of pod %s failed: %s", container.name, run.name, exc)
                self._finished(pod, container, exc)
            else:
                self._finished(pod, container, None)
                return
            if not restarting:
                return
            restarts += 1
            live = await self._backed_off(pod, restarts, container)
            if live is None:
                return
            self._set_status(live, restarted_status(live, container, self._now()))
            self._cluster.settle(everything=False)

    async def _backed_off(self, pod: dict[str, Any], restarts: int, container: ContainerRun) -> dict[str, Any] | None:
        """Wait out the kubelet's CrashLoopBackOff before restart number `restarts` (10 s, doubling,
        at most 5 minutes, on the cluster's clock), saying so in a BackOff event; the pod as stored
        then, or None when it is gone."""
        live = self._live(pod)
        if live is None:
            return None
        meta = live["metadata"]
        message = (
            f"Back-off restarting failed container {container.name} in pod "
            f"{meta['name']}_{meta['namespace']}({meta['uid']})"
        )
        self._event(live, str(live.get("spec", {}).get("nodeName", "")), "BackOff", message)
        await self._cluster.clock.sleep(min(RESTART_BACKOFF * 2 ** (restarts - 1), MAX_RESTART_BACKOFF))
        log = self.logs.get((meta["uid"], container.name))
        if log is not None:
            log.restarted()
        return self._live(pod)

    def _live(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod as stored now (read only), if it is still the same pod."""
        meta = pod["metadata"]
        live = self._cluster.store.peek(self._cluster.resource("v1", "Pod"), meta["namespace"], meta["name"])
        return live if live is not None and live["metadata"]["uid"] == meta["uid"] else None

    def _finished(self, pod: dict[str, Any], container: ContainerRun, error: Exception | None) -> None:
        """A container's process ended: record how, and the pod phase that follows."""
        live = self._live(pod)
        if live is None:
            return
        self._set_status(live, finished_status(live, container, error, self._now()))
        self._cluster.settle(everything=False)

    def _event(self, pod: dict[str, Any], node_name: str, reason: str, message: str) -> None:
        record_event(self._cluster, pod, reason, message, component=MANAGER, host=node_name)


async def _idle(run: PodRun, node: NodeRun) -> None:
    """A container of no known program: it runs until its pod goes."""
    await asyncio.Event().wait()


def _stop_if_cancelled(exc: Exception) -> None:
    """A container that fails while its pod is being stopped has not crashed: it is not restarted.

    Its process may turn the cancellation into an error of its own on the way out (a server's
    shutdown failing, say); restarting it then would wait out a back-off on a clock that may
    never move again, and the pod would never stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc
