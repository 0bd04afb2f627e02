"""bcd's GPU health watch against the NVML stand-in, and the stand-in against pynvml's own names."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pynvml

from better_compute.bcd import simnvml
from better_compute.bcd.deviceplugin import DevicePlugin
from better_compute.bcd.health import HEALTHY, HealthWatch, with_health
from better_compute.bcd.inventory import read_inventory
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.bcd.simnvml import SimulatedNvml
from better_compute.bcd.state import NodeState
from better_compute.core.clock import SimClock
from better_compute.wire.protocol import Assignment, GpuHealth, ReservationDevices


def test_the_stand_in_answers_with_pynvmls_own_names_and_values() -> None:
    names = [
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_TIMEOUT",
        "NVML_ERROR_GPU_IS_LOST",
        "NVML_FEATURE_ENABLED",
        "NVML_VOLATILE_ECC",
        "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "nvmlEventTypeXidCriticalError",
        "nvmlClocksThrottleReasonHwSlowdown",
        "nvmlClocksThrottleReasonHwThermalSlowdown",
        "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
    ]
    for name in names:
        assert getattr(SimulatedNvml, name) == getattr(pynvml, name), name
    calls = [n for n in dir(SimulatedNvml) if n.startswith("nvml") and callable(getattr(SimulatedNvml, n))]
    assert calls and all(callable(getattr(pynvml, n, None)) for n in calls), "every call bcd makes is pynvml's"


def nvml(count: int = 4) -> SimulatedNvml:
    return SimulatedNvml.from_spec(f"{count}xH100", "health-node")


def test_each_fault_makes_only_its_gpu_unhealthy_with_the_reason() -> None:
    table = nvml()
    watch = HealthWatch(table, clock=SimClock())
    watch.start()
    uuids = [g.uuid for g in table.gpus]
    assert set(watch.check().values()) == {HEALTHY}

    table.inject(1, xid=79)
    table.inject(2, ecc=3)
    table.inject(3, lost=True)
    health = {uuid: (h.healthy, h.reason, h.xid) for uuid, h in watch.check().items()}
    assert health == {
        uuids[0]: (True, None, None),
        uuids[1]: (False, "xid", 79),
        uuids[2]: (False, "double-bit-ecc", None),
        uuids[3]: (False, "gpu-lost", None),
    }

    table.clear(1)
    table.clear(2)
    table.clear(3)
    table.inject(0, remap_pending=True)
    table.inject(2, slowdown=True)
    health = {uuid: (h.healthy, h.reason) for uuid, h in watch.check().items()}
    assert health[uuids[0]] == (False, "row-remap-pending")
    assert health[uuids[2]] == (False, "hw-slowdown")
    watch.stop()


def test_an_xid_before_the_watch_registered_is_not_seen_as_nvml_would_not_deliver_it() -> None:
    table = nvml(2)
    table.inject(0, xid=48)  # no event set registered yet
    watch = HealthWatch(table)
    watch.start()
    assert set(watch.check().values()) == {HEALTHY}


async def test_the_watch_reports_a_change_on_the_clock_and_only_a_change() -> None:
    clock = SimClock()
    table = nvml(2)
    seen: list[dict[str, GpuHealth]] = []

    async def changed(health: dict[str, GpuHealth]) -> None:
        seen.append(dict(health))

    task = asyncio.create_task(HealthWatch(table).watch(clock, changed, check_seconds=5))
    try:
        while clock.next_wakeup() is None:
            await asyncio.sleep(0)
        assert seen == [], "all healthy at start: nothing to report"
        table.inject(1, xid=79)
        clock.advance(5)
        while not seen:
            await asyncio.sleep(0)
        assert seen[-1][table.gpus[1].uuid].xid == 79
        clock.advance(5)
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(seen) == 1, "unchanged health is not reported again"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_bcd_inventory_carries_each_gpus_health() -> None:
    env = {"BCD_SIMULATED_GPUS": "2xH100", "BCD_HOSTNAME": "inventory-health"}
    simnvml.simulated_nvml("inventory-health", "2xH100").inject(1, ecc=1)
    try:
        inventory = with_health(read_inventory(env), simnvml.simulated_nvml("inventory-health"))
        assert [g.health.healthy for g in inventory.gpus] == [True, False]
        wire = inventory.model_dump(mode="json", by_alias=True)
        assert wire["gpus"][1]["health"]["reason"] == "double-bit-ecc"
    finally:
        simnvml.forget_simulated_nvml("inventory-health")


async def test_list_and_watch_marks_an_unhealthy_held_device_at_once(kubelet: tuple[Any, Path]) -> None:
    _, path = kubelet
    state = NodeState(["GPU-a", "GPU-b"])
    plugin = DevicePlugin(state, kubelet_socket=path)
    await plugin.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{plugin.socket}") as channel:
            stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
            await stream.read()
            await state.apply(Assignment(reservations=[ReservationDevices(id="rsv_1", devices=["GPU-a", "GPU-b"])]))
            held = await asyncio.wait_for(stream.read(), 5)
            assert {d.ID: d.health for d in held.devices} == {"GPU-a": "Healthy", "GPU-b": "Healthy"}
            await state.set_unhealthy(["GPU-b"])
            sick = await asyncio.wait_for(stream.read(), 5)
            assert {d.ID: d.health for d in sick.devices} == {"GPU-a": "Healthy", "GPU-b": "Unhealthy"}
            await state.set_unhealthy([])
            back = await asyncio.wait_for(stream.read(), 5)
            assert {d.health for d in back.devices} == {"Healthy"}
    finally:
        await plugin.stop()
