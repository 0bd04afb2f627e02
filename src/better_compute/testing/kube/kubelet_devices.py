"""A simulated Node's devices: its GPUs and their faults (NVML), the driver's install, device plugins (the kubelet's
Registration socket, host plugins) and the GPUs each container gets through their Allocate."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from better_compute.bcd.simnvml import SimulatedNvml
from better_compute.testing.kube.allocation import allocate, host_mounts, privileged
from better_compute.testing.kube.deviceplugin import RegistrationServer
from better_compute.testing.kube.gpus import (
    RUNTIME_CONFIG,
    ContainerDevices,
    NodeGpus,
    runtime_config_text,
    visible_gpus,
)
from better_compute.testing.kube.kubelet_state import KubeletNode, KubeletState
from better_compute.testing.kube.runtime import ContainerRun

__all__ = ["NodeDevices"]


class NodeDevices(KubeletState):
    """GPUs, drivers and device plugins of the simulated Nodes, and each container's GPUs."""

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

    def _gpus_changed(self, state: KubeletNode) -> None:
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
