"""The device plugin advertises only held devices, follows assignments, and refuses the rest."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import grpc
import pytest

from better_compute.bcd.deviceplugin import DevicePlugin, container_response, preferred
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.bcd.state import NodeState
from better_compute.core.clock import SimClock
from better_compute.wire.protocol import Assignment, ReservationDevices

DEVICES = ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]


def holding(*devices: str, reservation: str = "rsv_1") -> Assignment:
    return Assignment(reservations=[ReservationDevices(id=reservation, devices=list(devices))])


async def test_registers_with_the_kubelet_at_the_configured_socket(
    kubelet: tuple[Any, Path],
) -> None:
    fake, path = kubelet
    plugin = DevicePlugin(NodeState(DEVICES), kubelet_socket=path, resource_name="nvidia.com/gpu")
    await plugin.start()
    try:
        assert len(fake.requests) == 1
        request = fake.requests[0]
        assert (request.version, request.endpoint, request.resource_name) == ("v1beta1", "bcd.sock", "nvidia.com/gpu")
        assert request.options.get_preferred_allocation_available
        assert plugin.socket.exists()
    finally:
        await plugin.stop()


async def test_list_and_watch_follows_the_assignment_and_allocate_refuses_unheld(
    kubelet: tuple[Any, Path],
) -> None:
    _, path = kubelet
    state = NodeState(DEVICES)
    plugin = DevicePlugin(state, kubelet_socket=path)
    await plugin.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{plugin.socket}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(pb.Empty())
            first = await stream.read()
            assert [d.ID for d in first.devices] == []  # nothing booked: nothing advertised

            await state.apply(holding("GPU-c", "GPU-a", "GPU-unknown"))
            second = await asyncio.wait_for(stream.read(), 5)
            assert [d.ID for d in second.devices] == ["GPU-a", "GPU-c"]
            assert {d.health for d in second.devices} == {"Healthy"}

            ok = await stub.Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-a"])])
            )
            assert ok.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
            assert ok.container_responses[0].annotations["bc.dev/reservations"] == "rsv_1"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Allocate(
                    pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-a", "GPU-b"])])
                )
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "GPU-b" in (refused.value.details() or "")

            await state.apply(Assignment())
            third = await asyncio.wait_for(stream.read(), 5)
            assert [d.ID for d in third.devices] == []
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.Allocate(
                    pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-a"])])
                )
            stream.cancel()
    finally:
        await plugin.stop()


async def test_options_and_preferred_allocation(kubelet: tuple[Any, Path]) -> None:
    _, path = kubelet
    state = NodeState(DEVICES)
    await state.apply(holding("GPU-b", "GPU-c", "GPU-d"))
    plugin = DevicePlugin(state, kubelet_socket=path)
    await plugin.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{plugin.socket}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            options = await stub.GetDevicePluginOptions(pb.Empty())
            assert options.get_preferred_allocation_available and not options.pre_start_required
            answer = await stub.GetPreferredAllocation(
                pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=["GPU-a", "GPU-b", "GPU-c", "GPU-d"],
                            must_include_deviceIDs=["GPU-d"],
                            allocation_size=2,
                        )
                    ]
                )
            )
            assert list(answer.container_responses[0].deviceIDs) == ["GPU-d", "GPU-b"]
    finally:
        await plugin.stop()


def test_preferred_never_offers_an_unheld_device() -> None:
    assert preferred(["GPU-a", "GPU-b"], [], 2, held=["GPU-b"]) == ["GPU-b"]


async def test_registers_again_when_the_kubelet_restarts_and_removes_the_socket(kubelet: tuple[Any, Path]) -> None:
    from better_compute.core.clock import SimClock

    fake, path = kubelet
    clock = SimClock()
    plugin = DevicePlugin(NodeState(DEVICES), kubelet_socket=path)
    task = asyncio.create_task(plugin.serve(clock, check_seconds=5))
    try:
        while len(fake.requests) < 1:
            await asyncio.sleep(0.01)
        clock.advance(5)
        await asyncio.sleep(0.05)
        assert len(fake.requests) == 1  # socket still there: nothing to do
        plugin.socket.unlink()
        clock.advance(5)
        while len(fake.requests) < 2:
            await asyncio.sleep(0.01)
        assert plugin.socket.exists()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_kubelet_that_is_not_up_yet_is_tried_again_on_the_clock(
    socket_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from better_compute.core.clock import SimClock

    from .conftest import FakeKubelet

    clock = SimClock()
    path = socket_dir / "kubelet.sock"
    plugin = DevicePlugin(NodeState(DEVICES), kubelet_socket=path)
    task = asyncio.create_task(plugin.serve(clock, check_seconds=5))
    try:
        while "did not take the registration" not in caplog.text:
            await asyncio.sleep(0.01)
        fake = FakeKubelet()
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(fake, server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        try:
            clock.advance(5)
            while not fake.requests:
                await asyncio.sleep(0.01)
            assert fake.requests[0].resource_name == "nvidia.com/gpu"
        finally:
            await server.stop(grace=None)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_allocate_names_only_the_containers_devices_in_every_form_a_runtime_takes() -> None:
    indexes = {"GPU-a": 0, "GPU-c": 2}
    plain = container_response(["GPU-c"], indexes, ["rsv_1"], None)
    assert plain.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-c"
    assert [(m.container_path, m.host_path) for m in plain.mounts] == [
        ("/var/run/nvidia-container-devices/GPU-c", "/dev/null")
    ]
    assert list(plain.devices) == [], "no device nodes where the NVIDIA runtime gives them"
    cos = container_response(["GPU-c"], indexes, ["rsv_1"], "/home/kubernetes/bin/nvidia")
    assert [d.host_path for d in cos.devices] == [
        "/dev/nvidia2",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert ("/usr/local/nvidia", "/home/kubernetes/bin/nvidia") in [(m.container_path, m.host_path) for m in cos.mounts]


async def test_another_plugin_socket_in_the_kubelets_directory_is_reported_until_it_goes(
    kubelet: tuple[Any, Path],
) -> None:
    _, path = kubelet
    reports: list[list[str]] = []

    async def report(plugins: list[str]) -> None:
        reports.append(plugins)

    clock = SimClock()
    plugin = DevicePlugin(NodeState(DEVICES), kubelet_socket=path, on_competitors=report)
    serving = asyncio.create_task(plugin.serve(clock, check_seconds=5))
    try:
        for _ in range(200):
            if plugin.socket.exists():
                break
            await asyncio.sleep(0.01)
        assert reports == [], "bcd's own socket and the kubelet's are no competitors"
        (path.parent / "nvidia-gpu.sock").touch()
        clock.advance(5)
        for _ in range(200):
            if reports:
                break
            await asyncio.sleep(0.01)
        assert reports == [["nvidia-gpu.sock"]]
        (path.parent / "nvidia-gpu.sock").unlink()
        clock.advance(5)
        for _ in range(200):
            if len(reports) == 2:
                break
            await asyncio.sleep(0.01)
        assert reports == [["nvidia-gpu.sock"], []]
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
