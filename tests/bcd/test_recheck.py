"""Recheck and return (issue 28 item 3) against the NVML stand-in, exact on the simulated clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.health import HEALTHY, HealthWatch
from better_compute.bcd.recheck import HoldFile, Recheck, needs_reset
from better_compute.bcd.simnvml import SimulatedNvml
from better_compute.core.clock import SimClock
from better_compute.wire.protocol import GpuHealth


def watched(clock: SimClock, clean_seconds: float = 600) -> tuple[SimulatedNvml, HealthWatch, list[str]]:
    table = SimulatedNvml.from_spec("2xH100", "recheck-node")
    watch = HealthWatch(table, clock=clock, clean_seconds=clean_seconds)
    watch.start()
    return table, watch, [g.uuid for g in table.gpus]


def test_a_transient_xid_returns_after_the_clean_period_and_not_before() -> None:
    clock = SimClock()
    table, watch, uuids = watched(clock)
    table.inject(0, xid=13)  # a graphics engine exception: the GPU recovers by itself
    assert watch.check()[uuids[0]] == GpuHealth(healthy=False, reason="xid", xid=13)
    clock.advance(5)
    first_clean = clock.now()
    rechecking = watch.check()[uuids[0]]
    assert (rechecking.healthy, rechecking.xid) == (False, 13)
    assert rechecking.detail is not None and "rechecking" in rechecking.detail
    assert rechecking.rechecking_until == first_clean + timedelta(seconds=600), "it says when it returns"
    assert not rechecking.reset_needed
    clock.advance(599.999)
    assert not watch.check()[uuids[0]].healthy, "not before the clean period"
    clock.advance(0.001)
    assert clock.now() - first_clean == timedelta(seconds=600)
    assert watch.check()[uuids[0]] == HEALTHY, "back once it read healthy for 10 minutes"
    assert watch.check()[uuids[1]] == HEALTHY


def test_a_new_fault_during_the_clean_period_starts_it_again() -> None:
    clock = SimClock()
    table, watch, uuids = watched(clock)
    table.inject(1, ecc=2)
    watch.check()
    table.clear(1)
    clock.advance(5)
    watch.check()  # clean since now
    clock.advance(300)
    table.inject(1, xid=31)  # a page fault XID: transient
    assert watch.check()[uuids[1]].reason == "xid"
    clock.advance(5)
    watch.check()
    clock.advance(595)
    assert not watch.check()[uuids[1]].healthy, "the count started again at the new fault"
    clock.advance(5)
    assert watch.check()[uuids[1]] == HEALTHY


def test_a_fault_that_needs_a_reset_is_held_however_long_the_gpu_reads_healthy() -> None:
    clock = SimClock()
    table, watch, uuids = watched(clock)
    table.inject(0, xid=79)  # an XID alone: nothing bcd reads later can show that GPU was reset
    table.inject(1, remap_pending=True)  # pending until a reset applies it
    watch.check()
    table.clear(0)
    for _ in range(3):
        clock.advance(86_400)
        health = watch.check()
        assert (health[uuids[0]].reason, health[uuids[0]].xid) == ("xid", 79)
        assert health[uuids[1]].reason == "row-remap-pending"
    assert health[uuids[0]].detail == "XID 79 needs a GPU reset or a reboot"
    assert health[uuids[0]].reset_needed and health[uuids[1]].reset_needed
    assert health[uuids[0]].rechecking_until is None
    assert all(needs_reset(GpuHealth(healthy=False, reason="xid", xid=x)) for x in (48, 79))
    assert not needs_reset(GpuHealth(healthy=False, reason="xid", xid=13))


@pytest.mark.parametrize(
    ("fault", "still_there"),
    [
        ({"xid": 79, "lost": True}, "gpu-lost"),
        ({"xid": 48, "ecc": 1}, "double-bit-ecc"),
        ({"xid": 63, "remap_pending": True}, "row-remap-pending"),
        ({"lost": True}, "gpu-lost"),
    ],
)
def test_a_gpu_reset_without_a_reboot_ends_the_hold_and_the_clean_period_applies(
    fault: dict[str, Any], still_there: str
) -> None:
    clock = SimClock()
    table, watch, uuids = watched(clock)
    table.inject(0, **fault)
    held = watch.check()[uuids[0]]
    assert not held.healthy and held.detail is not None and "needs a GPU reset" in held.detail
    clock.advance(5)
    assert watch.check()[uuids[0]] == held, f"{still_there} read: the fault is still there, still held"
    clock.advance(86_400)
    assert watch.check()[uuids[0]] == held

    table.clear(0)  # `nvidia-smi -r`: the GPU answers again, volatile ECC zero, the remap applied
    clock.advance(5)
    reset_at = clock.now()
    rechecking = watch.check()[uuids[0]]
    assert not rechecking.healthy and rechecking.detail is not None and "rechecking" in rechecking.detail
    assert held.reset_needed and not rechecking.reset_needed, "reset: it says rechecking, no longer reset-needed"
    assert rechecking.rechecking_until == reset_at + timedelta(seconds=600)
    assert watch.recheck.held() == {}, "no longer held for a reset"
    clock.advance(599.999)
    assert not watch.check()[uuids[0]].healthy, "not before the clean period"
    clock.advance(0.001)
    assert clock.now() - reset_at == timedelta(seconds=600)
    assert watch.check()[uuids[0]] == HEALTHY


def test_a_failed_row_remap_stays_held_since_nvml_keeps_the_failure() -> None:
    clock = SimClock()
    table, watch, uuids = watched(clock)
    table.gpus[0].remap_failed = True  # "set if a row remapping ever failed in the past"
    assert watch.check()[uuids[0]].reason == "row-remap-failed"
    table.inject(0, ecc=0)
    clock.advance(86_400)
    assert watch.check()[uuids[0]].reason == "row-remap-failed"
    assert uuids[0] in watch.recheck.held()


async def test_the_watch_returns_a_transient_fault_exactly_on_the_clock() -> None:
    clock = SimClock()
    table = SimulatedNvml.from_spec("1xH100", "recheck-watch")
    seen: list[tuple[float, bool]] = []
    start = clock.now()

    async def changed(health: dict[str, GpuHealth]) -> None:
        seen.append(((clock.now() - start).total_seconds(), next(iter(health.values())).healthy))

    watch = HealthWatch(table, clean_seconds=600)
    task = asyncio.create_task(watch.watch(clock, changed, check_seconds=5))
    try:
        while clock.next_wakeup() is None:
            await asyncio.sleep(0)
        table.inject(0, xid=13)
        while not seen or not seen[-1][1]:
            wake = clock.next_wakeup()
            assert wake is not None
            clock.advance_to(wake)
            for _ in range(5):
                await asyncio.sleep(0)
        assert [s for s in seen if s[1]] == [(610.0, True)], seen
        assert seen[0] == (5.0, False)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_recheck_alone_keeps_a_healthy_gpu_healthy() -> None:
    assert Recheck().apply({"GPU-a": HEALTHY}, SimClock().now()) == {"GPU-a": HEALTHY}


def test_a_hold_survives_bcds_restart_and_a_reboot_puts_it_through_the_clean_period(tmp_path: Path) -> None:
    clock = SimClock()
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    table = SimulatedNvml.from_spec("1xH100", "recheck-reboot")
    uuid = table.gpus[0].uuid

    def bcd() -> HealthWatch:
        holds = HoldFile.in_state_dir(tmp_path, boot)
        assert holds is not None
        watch = HealthWatch(table, clock=clock, clean_seconds=600, holds=holds)
        watch.start()
        return watch

    first = bcd()
    table.inject(0, xid=79)
    assert first.check()[uuid].xid == 79
    first.stop()

    table.clear(0)
    again = bcd()  # bcd restarted, same boot: still held
    clock.advance(86_400)
    assert (again.check()[uuid].reason, again.check()[uuid].xid) == ("xid", 79)
    assert again.check()[uuid].reset_needed
    again.stop()

    boot.write_text("boot-2\n")  # the machine rebooted
    rebooted = bcd()
    after_reboot = rebooted.check()[uuid]
    assert not after_reboot.healthy, "a reboot starts the clean period, not a return"
    assert not after_reboot.reset_needed and after_reboot.rechecking_until == clock.now() + timedelta(seconds=600)
    clock.advance(599)
    assert not rebooted.check()[uuid].healthy
    clock.advance(1)
    assert rebooted.check()[uuid] == HEALTHY
    assert bcd().check()[uuid] == HEALTHY, "the same boot again: the clean period is not served twice"
    assert HoldFile.in_state_dir(tmp_path, tmp_path / "missing") is None, "no boot id: holds stay in memory"
