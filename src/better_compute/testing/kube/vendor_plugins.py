"""The providers' own GPU device plugins and GKE's driver installer, as a node runs them.

A provider's plugin advertises every GPU its node's driver shows (none until the driver is
loaded, then all of them) and hands any of them to whoever asks: it knows nothing of
reservations. Its Allocate answers in the form its node's runtime needs (docs/providers.md):

- `device-specs`: GKE's plugin (GoogleCloudPlatform/container-engine-accelerators,
  pkg/gpu/nvidia): DeviceSpecs for `/dev/nvidiaN`, `nvidiactl`, `nvidia-uvm` and
  `nvidia-uvm-tools`, and the driver directory mounted at `/usr/local/nvidia`;
- `envvar`: NVIDIA's plugin by default (`DEVICE_LIST_STRATEGY=envvar`, DigitalOcean's):
  `NVIDIA_VISIBLE_DEVICES` with the device UUIDs;
- `volume-mounts`: NVIDIA's plugin as Bottlerocket runs it: `/dev/null` mounted at
  `/var/run/nvidia-container-devices/<uuid>`.

`plugin_program` makes the kubelet simulator's program for a plugin's DaemonSet pod;
`host_plugin` one for a node image that starts the plugin itself (Bottlerocket).
`driver_installer` is the program of GKE's driver installer image: its container loads the
driver on the node after `DRIVER_INSTALL_SECONDS` and exits, and with `managed=True` only on
a node whose `cloud.google.com/gke-gpu-driver-version` label asks GKE for a driver.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, Literal

import grpc

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.testing.kube.gpus import COS_DRIVER_DIR, VOLUME_MOUNT_ROOT
from better_compute.testing.kube.runtime import NodeRun, PodRun

if TYPE_CHECKING:
    from better_compute.testing.kube.kubelet import KubeletSimulator
    from better_compute.testing.kube.kubelet_state import NodeProgram

__all__ = [
    "DRIVER_INSTALL_SECONDS",
    "GKE_DRIVER_VERSION_LABEL",
    "Form",
    "driver_installer",
    "host_plugin",
    "plugin_program",
]

Form = Literal["device-specs", "envvar", "volume-mounts"]
DRIVER_INSTALL_SECONDS = 90.0
GKE_DRIVER_VERSION_LABEL = "cloud.google.com/gke-gpu-driver-version"
_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class _VendorPlugin(pb_grpc.DevicePluginServicer):
    def __init__(self, kubelet: KubeletSimulator, node: str, form: Form) -> None:
        self._kubelet = kubelet
        self._node = node
        self._form = form

    def _devices(self) -> list[str]:
        gpus = self._kubelet.gpus(self._node)
        return gpus.uuids(self._node) if gpus is not None and gpus.driver_ready else []

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions()

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        while True:
            changed = self._kubelet.gpus_changed(self._node)
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=d, health="Healthy") for d in self._devices()])
            await changed.wait()

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        return pb.PreferredAllocationResponse()

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()

    async def Allocate(self, request: Any, context: Any) -> Any:
        devices = self._devices()
        return pb.AllocateResponse(
            container_responses=[self._answer(list(c.devices_ids), devices) for c in request.container_requests]
        )

    def _answer(self, ids: list[str], devices: list[str]) -> Any:
        if self._form == "device-specs":
            nodes = [f"/dev/nvidia{devices.index(d)}" for d in ids if d in devices] + list(_CONTROL)
            return pb.ContainerAllocateResponse(
                devices=[pb.DeviceSpec(container_path=n, host_path=n, permissions="mrw") for n in nodes],
                mounts=[pb.Mount(container_path="/usr/local/nvidia", host_path=COS_DRIVER_DIR, read_only=True)],
            )
        if self._form == "envvar":
            return pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)})
        return pb.ContainerAllocateResponse(
            envs={"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNT_ROOT},
            mounts=[pb.Mount(container_path=f"{VOLUME_MOUNT_ROOT}/{d}", host_path="/dev/null") for d in ids],
        )


async def _serve(kubelet: KubeletSimulator, node: str, form: Form, endpoint: str) -> None:
    """Serve the plugin in the node's device-plugin directory and register it, until cancelled."""
    directory = (await kubelet.device_plugin_socket(node)).parent
    socket = directory / endpoint  # the kubelet dials <its directory>/<endpoint>, which may name a subdirectory
    socket.parent.mkdir(parents=True, exist_ok=True)
    server = grpc.aio.server()
    pb_grpc.add_DevicePluginServicer_to_server(_VendorPlugin(kubelet, node, form), server)
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix:{directory / 'kubelet.sock'}") as channel:
            request = pb.RegisterRequest(version="v1beta1", endpoint=endpoint, resource_name="nvidia.com/gpu")
            await pb_grpc.RegistrationStub(channel).Register(request)
        await asyncio.Event().wait()
    finally:
        await server.stop(grace=None)
        with contextlib.suppress(OSError):
            socket.unlink()


def plugin_program(kubelet: KubeletSimulator, form: Form, endpoint: str) -> NodeProgram:
    """The program of a provider's plugin image: its container serves the plugin on its node."""

    async def run(pod: PodRun, node: NodeRun) -> None:
        await _serve(kubelet, node.name, form, endpoint)

    return run


def host_plugin(kubelet: KubeletSimulator, node: str, form: Form, endpoint: str) -> Coroutine[Any, Any, None]:
    """A plugin the node image runs outside Kubernetes (for `KubeletSimulator.start_host_plugin`)."""
    return _serve(kubelet, node, form, endpoint)


def driver_installer(kubelet: KubeletSimulator, *, managed: bool) -> NodeProgram:
    """The program of GKE's driver installer image (see the module docstring)."""

    async def run(pod: PodRun, node: NodeRun) -> None:
        if managed and node.labels.get(GKE_DRIVER_VERSION_LABEL) not in ("default", "latest"):
            return
        await kubelet.clock_sleep(DRIVER_INSTALL_SECONDS)
        kubelet.install_driver(node.name)

    return run
