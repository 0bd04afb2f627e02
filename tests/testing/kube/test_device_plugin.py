"""Device-plugin registration: the kubelet's Registration socket and ListAndWatch reflected on the Node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.testing.kube import KubeCluster


class FakePlugin(pb_grpc.DevicePluginServicer):
    """A plugin whose device list the test changes; each change is one ListAndWatch message."""

    def __init__(self) -> None:
        self.updates: asyncio.Queue[list[tuple[str, str]]] = asyncio.Queue()

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions()

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        while True:
            devices = await self.updates.get()
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health=h) for i, h in devices])


def advertised(cluster: KubeCluster, node: str, resource: str) -> tuple[str | None, str | None]:
    status = cluster.get_object("Node", node)["status"]  # type: ignore[index]
    return status["capacity"].get(resource), status["allocatable"].get(resource)


async def until(
    cluster: KubeCluster, node: str, resource: str, expected: tuple[str, str]
) -> tuple[str | None, str | None]:
    """Poll the Node (the plugin's stream is read by a background task) until it shows `expected`."""
    for _ in range(500):
        if advertised(cluster, node, resource) == expected:
            break
        await asyncio.sleep(0.01)
    return advertised(cluster, node, resource)


@pytest.fixture
async def plugin_server(cluster: KubeCluster) -> AsyncIterator[tuple[FakePlugin, grpc.aio.Server, Path]]:
    await cluster.kubelet.add_node("gpu-1")
    directory = (await cluster.kubelet.device_plugin_socket("gpu-1")).parent
    plugin = FakePlugin()
    server = grpc.aio.server()
    pb_grpc.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix:{directory / 'bc-gpu.sock'}")
    await server.start()
    try:
        yield plugin, server, directory
    finally:
        await server.stop(grace=None)


async def register(directory: Path, version: str = "v1beta1") -> None:
    async with grpc.aio.insecure_channel(f"unix:{directory / 'kubelet.sock'}") as channel:
        stub = pb_grpc.RegistrationStub(channel)
        await stub.Register(pb.RegisterRequest(version=version, endpoint="bc-gpu.sock", resource_name="nvidia.com/gpu"))


async def test_registered_plugin_devices_become_node_capacity_and_allocatable(
    cluster: KubeCluster, plugin_server: tuple[FakePlugin, grpc.aio.Server, Path]
) -> None:
    plugin, server, directory = plugin_server
    assert (directory / "kubelet.sock").exists()
    assert advertised(cluster, "gpu-1", "nvidia.com/gpu") == (None, None)
    await register(directory)
    await plugin.updates.put([("GPU-0", "Healthy"), ("GPU-1", "Healthy"), ("GPU-2", "Healthy"), ("GPU-3", "Healthy")])
    assert await until(cluster, "gpu-1", "nvidia.com/gpu", ("4", "4")) == ("4", "4")
    await plugin.updates.put([("GPU-0", "Healthy"), ("GPU-1", "Unhealthy"), ("GPU-2", "Healthy"), ("GPU-3", "Healthy")])
    assert await until(cluster, "gpu-1", "nvidia.com/gpu", ("4", "3")) == ("4", "3")
    await server.stop(grace=None)
    assert await until(cluster, "gpu-1", "nvidia.com/gpu", ("4", "0")) == ("4", "0")


async def test_registration_with_an_unknown_api_version_is_refused(
    plugin_server: tuple[FakePlugin, grpc.aio.Server, Path],
) -> None:
    _, _, directory = plugin_server
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await register(directory, version="v1alpha")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
