"""The kubelet device plugin (API v1beta1): hands the kubelet exactly the GPUs the node holds.

bcd serves `DevicePlugin` on a unix socket in the kubelet's device plugin directory and
registers it with the kubelet's `Registration` service (the socket path is configurable).
ListAndWatch advertises only devices that a reservation holds and sends a new list as
soon as the assignment changes, or a held device's health does (bcd/health.py): an unhealthy
one is sent `Unhealthy`, so the kubelet gives it to no new container; Allocate refuses any
device that is not held, so a pod can never get a GPU that nobody booked. When the kubelet restarts it deletes the plugin
sockets; `serve` notices and serves and registers again.

Allocate answers in every form a node's runtime may take, each naming only the container's
devices (docs/providers.md): `NVIDIA_VISIBLE_DEVICES` with their UUIDs (an NVIDIA runtime
that reads the variable), `/dev/null` mounted at `/var/run/nvidia-container-devices/<uuid>`
(one that takes volume mounts, as bcd configures it: bcd/runtime_config.py), and, where the
node has no NVIDIA runtime (`driver_dir`, GKE's COS), DeviceSpecs for `/dev/nvidiaN`,
`nvidiactl`, `nvidia-uvm` and `nvidia-uvm-tools` with the driver directory mounted at
`/usr/local/nvidia`.

The kubelet keeps one plugin per resource name, the newest to register, so another plugin
for bcd's resource on the node can hand its GPUs to anyone. `serve` looks at the
device-plugin directory every check: any other plugin socket there is reported through
`on_competitors` (bcd puts it in its inventory, and the node takes no booking while it lasts).

bcd also notices its own registration being replaced: the kubelet closes the replaced plugin's
ListAndWatch stream (pkg/kubelet/cm/devicemanager, manager.go's addEndpoint: "Stops existing
endpoint if there is any"), while bcd's socket stays (a kubelet restart removes it instead).
bcd then reports the plugin that replaced it: every other socket anywhere under the
device-plugin directory, or `REPLACED_BY_UNKNOWN` when there is none to name, and waits. Once
none of them is there any more (the other plugin stopped), it registers again and takes its
resource back, since a gone plugin's devices stay registered to it, unhealthy, until then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.bcd.state import NodeState
from better_compute.core.clock import Clock

__all__ = [
    "API_VERSION",
    "KUBELET_SOCKET",
    "REPLACED_BY_UNKNOWN",
    "RESOURCE_NAME",
    "DevicePlugin",
    "DevicePluginService",
    "container_response",
    "preferred",
]

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
RESOURCE_NAME = "nvidia.com/gpu"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
REGISTER_TIMEOUT_SECONDS = 10.0
REPLACED_BY_UNKNOWN = "unknown (it replaced bcd's kubelet registration)"
"""What bcd reports when its registration was replaced and no other plugin socket is there to name."""
OPTIONS = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def preferred(available: list[str], must_include: list[str], size: int, held: list[str]) -> list[str]:
    """A preferred allocation: the required devices, then held ones in inventory order."""
    chosen = list(dict.fromkeys(must_include))
    offered = set(available)
    for device in held:
        if len(chosen) >= size:
            break
        if device in offered and device not in chosen:
            chosen.append(device)
    return chosen[: max(size, len(must_include))]


VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
DRIVER_MOUNT = "/usr/local/nvidia"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def container_response(
    devices: list[str], indexes: Mapping[str, int], reservations: list[str], driver_dir: str | None
) -> pb.ContainerAllocateResponse:
    """What the kubelet hands the runtime for a container given `devices` (see the module docstring)."""
    response = pb.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": ",".join(devices)},
        mounts=[
            pb.Mount(container_path=f"{VOLUME_MOUNT_ROOT}/{device}", host_path="/dev/null", read_only=True)
            for device in devices
        ],
        annotations={"bc.dev/reservations": ",".join(reservations)},
    )
    if driver_dir is not None:
        nodes = [f"/dev/nvidia{indexes[d]}" for d in devices if d in indexes] + list(CONTROL_DEVICES)
        response.devices.extend(pb.DeviceSpec(container_path=n, host_path=n, permissions="mrw") for n in nodes)
        response.mounts.append(pb.Mount(container_path=DRIVER_MOUNT, host_path=driver_dir, read_only=True))
    return response


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """The DevicePlugin gRPC service over a NodeState; `indexes` maps each device to its /dev/nvidiaN."""

    def __init__(
        self, state: NodeState, indexes: Mapping[str, int] | None = None, driver_dir: str | None = None
    ) -> None:
        self.state = state
        self.indexes = dict(indexes or {})
        self.driver_dir = driver_dir
        self.closed = asyncio.Event()
        """Set once a ListAndWatch stream ended: the kubelet closed it (it replaced bcd, or restarted)."""

    async def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(self, request: pb.Empty, context: Any) -> AsyncIterator[pb.ListAndWatchResponse]:
        try:
            async for held in self.state.changes():
                unhealthy = self.state.unhealthy()
                sick = sum(1 for device in held if device in unhealthy)
                log.info("advertising %d held device(s) to the kubelet, %d unhealthy", len(held), sick)
                yield pb.ListAndWatchResponse(
                    devices=[
                        pb.Device(ID=device, health=UNHEALTHY if device in unhealthy else HEALTHY) for device in held
                    ]
                )
        finally:
            self.closed.set()

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse:
        held = self.state.held()
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=preferred(
                        list(r.available_deviceIDs), list(r.must_include_deviceIDs), r.allocation_size, held
                    )
                )
                for r in request.container_requests
            ]
        )

    async def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        held = set(self.state.held())
        responses = []
        for container in request.container_requests:
            devices = list(container.devices_ids)
            refused = [device for device in devices if device not in held]
            if refused:
                message = f"device(s) {', '.join(refused)} not held by a reservation on this node"
                log.warning("Allocate refused: %s", message)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
            reservations = sorted({r for d in devices if (r := self.state.reservation_of(d)) is not None})
            responses.append(container_response(devices, self.indexes, reservations, self.driver_dir))
        return pb.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class DevicePlugin:
    """Serves the device plugin socket and registers it with the kubelet."""

    def __init__(
        self,
        state: NodeState,
        *,
        kubelet_socket: str | Path = KUBELET_SOCKET,
        endpoint: str = "bcd.sock",
        resource_name: str = RESOURCE_NAME,
        indexes: Mapping[str, int] | None = None,
        driver_dir: str | None = None,
        on_competitors: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.state = state
        self.indexes = dict(indexes or {})
        self.driver_dir = driver_dir
        self.on_competitors = on_competitors
        self.competitors: list[str] = []
        self.kubelet_socket = Path(kubelet_socket)
        self.socket = self.kubelet_socket.parent / endpoint
        self.endpoint = endpoint
        self.resource_name = resource_name
        self.replaced_by: list[str] = []
        """While bcd's registration is replaced: what replaced it (see the module docstring); else empty."""
        self._server: grpc.aio.Server | None = None
        self._service: DevicePluginService | None = None

    async def start(self) -> None:
        """Serve on the plugin socket, then register with the kubelet."""
        await self.stop()
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        service = DevicePluginService(self.state, self.indexes, self.driver_dir)
        pb_grpc.add_DevicePluginServicer_to_server(service, server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server, self._service = server, service
        await self.register()

    async def register(self) -> None:
        """Registration.Register at the kubelet socket; raises grpc.aio.AioRpcError if refused."""
        request = pb.RegisterRequest(
            version=API_VERSION, endpoint=self.endpoint, resource_name=self.resource_name, options=OPTIONS
        )
        async with grpc.aio.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            await pb_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_SECONDS)
        log.info("registered %s at %s (socket %s)", self.resource_name, self.kubelet_socket, self.socket)

    async def serve(self, clock: Clock, *, check_seconds: float = 5.0) -> None:
        """Serve and register, and again whenever the kubelet removed the socket (it restarted); until cancelled.

        A kubelet that is not answering yet, or refuses the registration, is tried again every
        `check_seconds`: the node's gateway session stays up meanwhile.
        """
        registered = False
        try:
            while True:
                if registered and self.socket.exists() and self._replaced():
                    registered = False  # the other plugin is gone: take the resource back below
                if not registered or not self.socket.exists():
                    if registered:
                        log.info("the kubelet removed %s (it restarted); registering again", self.socket)
                    try:
                        await self.start()
                        registered = True
                        self.replaced_by = []
                    except grpc.aio.AioRpcError as exc:
                        registered = False
                        log.warning(
                            "the kubelet at %s did not take the registration (%s: %s); trying again in %.0f s",
                            self.kubelet_socket,
                            exc.code().name,
                            exc.details(),
                            check_seconds,
                        )
                await self._look_for_competitors()
                await clock.sleep(check_seconds)
        finally:
            await self.stop()

    def other_plugins(self, *, anywhere: bool = False) -> list[str]:
        """The other plugin sockets in the kubelet's device-plugin directory (any of them may register bcd's
        resource), or `anywhere` under it (a plugin may register an endpoint in a directory of its own)."""
        directory = self.kubelet_socket.parent
        try:
            found = directory.rglob("*.sock") if anywhere else directory.glob("*.sock")
            names = [p.relative_to(directory).as_posix() for p in found]
        except OSError:
            return []
        return sorted(name for name in names if name not in (self.kubelet_socket.name, self.socket.name))

    def _replaced(self) -> bool:
        """Whether bcd's registration is replaced by a plugin that is gone now (time to register again).

        The first check after the kubelet closed bcd's stream names what replaced it (`replaced_by`)."""
        service = self._service
        if service is None or not service.closed.is_set():
            return False
        if not self.replaced_by:
            self.replaced_by = self.other_plugins(anywhere=True) or [REPLACED_BY_UNKNOWN]
            log.error(
                "the kubelet replaced bcd's registration for %s: another device plugin registered it (%s), so pods "
                "may get GPUs without a reservation; the node takes no bookings until it is gone",
                self.resource_name,
                ", ".join(self.replaced_by),
            )
            return False
        still = set(self.other_plugins(anywhere=True))
        if any(name in still for name in self.replaced_by):
            return False
        log.info("the plugin that replaced bcd is gone (%s); registering again", ", ".join(self.replaced_by))
        return True

    async def _look_for_competitors(self) -> None:
        others = sorted({*self.other_plugins(), *self.replaced_by})
        if others == self.competitors:
            return
        if others:
            log.error(
                "another device plugin is on this node (%s): the kubelet keeps one plugin per resource, the newest, "
                "so pods may get GPUs without a reservation; the node takes no bookings until it is gone",
                ", ".join(others),
            )
        else:
            log.info("no other device plugin on this node any more (%s gone)", ", ".join(self.competitors))
        self.competitors = others
        if self.on_competitors is not None:
            await self.on_competitors(others)

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop(grace=None)
