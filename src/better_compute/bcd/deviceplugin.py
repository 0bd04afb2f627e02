"""The kubelet device plugin (API v1beta1): hands the kubelet exactly the GPUs the node holds.

bcd serves `DevicePlugin` on a unix socket in the kubelet's device plugin directory and
registers it with the kubelet's `Registration` service (the socket path is configurable).
ListAndWatch advertises only devices that a reservation holds and sends a new list as
soon as the assignment changes; Allocate refuses any device that is not held, so a pod can
never get a GPU that nobody booked. When the kubelet restarts it deletes the plugin
sockets; `serve` notices and serves and registers again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.bcd.state import NodeState
from better_compute.core.clock import Clock

__all__ = ["API_VERSION", "KUBELET_SOCKET", "RESOURCE_NAME", "DevicePlugin", "DevicePluginService", "preferred"]

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
RESOURCE_NAME = "nvidia.com/gpu"
HEALTHY = "Healthy"
REGISTER_TIMEOUT_SECONDS = 10.0
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


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """The DevicePlugin gRPC service over a NodeState."""

    def __init__(self, state: NodeState) -> None:
        self.state = state

    async def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(self, request: pb.Empty, context: Any) -> AsyncIterator[pb.ListAndWatchResponse]:
        async for held in self.state.changes():
            log.info("advertising %d held device(s) to the kubelet", len(held))
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=device, health=HEALTHY) for device in held])

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
            responses.append(
                pb.ContainerAllocateResponse(
                    envs={"NVIDIA_VISIBLE_DEVICES": ",".join(devices)},
                    annotations={"bc.dev/reservations": ",".join(reservations)},
                )
            )
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
    ) -> None:
        self.state = state
        self.kubelet_socket = Path(kubelet_socket)
        self.socket = self.kubelet_socket.parent / endpoint
        self.endpoint = endpoint
        self.resource_name = resource_name
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Serve on the plugin socket, then register with the kubelet."""
        await self.stop()
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(DevicePluginService(self.state), server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server
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
                if not registered or not self.socket.exists():
                    if registered:
                        log.info("the kubelet removed %s (it restarted); registering again", self.socket)
                    try:
                        await self.start()
                        registered = True
                    except grpc.aio.AioRpcError as exc:
                        registered = False
                        log.warning(
                            "the kubelet at %s did not take the registration (%s: %s); trying again in %.0f s",
                            self.kubelet_socket,
                            exc.code().name,
                            exc.details(),
                            check_seconds,
                        )
                await clock.sleep(check_seconds)
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop(grace=None)
