"""The kubelet's side of the device plugin API v1beta1, on a unix socket.

Each simulated Node serves `Registration/Register` at
`<device_plugin_dir>/kubelet.sock`. A plugin that registers gets dialled back at
`<device_plugin_dir>/<endpoint>`; the simulator follows its `ListAndWatch`
stream and writes the advertised devices into the Node's `status.capacity`
(all devices) and `status.allocatable` (the healthy ones). When the stream
ends, the resource's allocatable count drops to zero, as when a real plugin dies.
As in the kubelet's device manager (pkg/kubelet/cm/devicemanager), one endpoint is
kept per resource name: a newer registration replaces the older one, whose stream
is closed (manager.go's addEndpoint: "Stops existing endpoint if there is any"), and
each ListAndWatch message replaces the node's devices for it. A plugin that goes keeps
its registration, its devices unhealthy, until another registers the resource.
An endpoint may name a subdirectory: the kubelet dials `<directory>/<endpoint>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["KUBELET_SOCKET", "PluginDevice", "RegistrationServer"]

KUBELET_SOCKET = "kubelet.sock"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginDevice:
    id: str
    health: str


@dataclass
class _Plugin:
    resource_name: str
    endpoint: str
    preferred_allocation: bool = False
    devices: list[PluginDevice] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    channel: grpc.aio.Channel | None = None


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, owner: RegistrationServer) -> None:
        self._owner = owner

    async def Register(self, request: Any, context: Any) -> Any:
        if request.version != "v1beta1":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported API version {request.version!r}")
        self._owner.register(
            request.resource_name, request.endpoint, preferred=request.options.get_preferred_allocation_available
        )
        return pb.Empty()


class RegistrationServer:
    """One Node's Registration service and the plugins that registered with it."""

    def __init__(self, cluster: KubeCluster, node_name: str, directory: Path) -> None:
        self._cluster = cluster
        self._node = node_name
        self.directory = directory
        self.plugins: dict[str, _Plugin] = {}
        self._server: grpc.aio.Server | None = None

    @property
    def socket_path(self) -> Path:
        return self.directory / KUBELET_SOCKET

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), self._server)
        self._server.add_insecure_port(f"unix:{self.socket_path}")
        await self._server.start()

    def register(self, resource_name: str, endpoint: str, *, preferred: bool = False) -> None:
        """The newest registration for a resource name wins: the older plugin's stream is closed
        and the newer one's ListAndWatch alone decides the resource's devices from now on."""
        old = self.plugins.pop(resource_name, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        plugin = _Plugin(resource_name, endpoint, preferred)
        self.plugins[resource_name] = plugin
        plugin.task = asyncio.get_running_loop().create_task(
            self._watch(plugin), name=f"device-plugin:{self._node}:{resource_name}"
        )

    async def _watch(self, plugin: _Plugin) -> None:
        target = f"unix:{self.directory / plugin.endpoint}"
        plugin.channel = grpc.aio.insecure_channel(target)
        stub = pb_grpc.DevicePluginStub(plugin.channel)
        try:
            async for response in stub.ListAndWatch(pb.Empty()):
                plugin.devices = [PluginDevice(d.ID, d.health) for d in response.devices]
                self._reflect(plugin)
        except grpc.aio.AioRpcError as exc:
            _log.info("device plugin %s on %s went away: %s", plugin.resource_name, self._node, exc.code())
        finally:
            with contextlib.suppress(Exception):
                await plugin.channel.close()
        plugin.devices = [PluginDevice(d.id, "Unhealthy") for d in plugin.devices]
        self._reflect(plugin)

    def _reflect(self, plugin: _Plugin) -> None:
        healthy = sum(1 for d in plugin.devices if d.health == "Healthy")
        self._cluster.kubelet.set_node_resources(self._node, plugin.resource_name, len(plugin.devices), healthy)

    async def stop(self) -> None:
        for plugin in self.plugins.values():
            if plugin.task is not None:
                plugin.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await plugin.task
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
