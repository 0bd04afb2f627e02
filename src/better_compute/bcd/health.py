"""bcd's GPU health watch through NVML: what makes a GPU unhealthy, read every check.

`HealthWatch(nvml)` takes the `pynvml` module on a real node, or bcd/simnvml's stand-in where
`BCD_SIMULATED_GPUS` is set: the calls are the same. Each `check()` reads, per GPU, in this order
(the first that applies is the reason; docs/bcd.md, "GPU health"):

- any call failing with NVML_ERROR_GPU_IS_LOST: `gpu-lost`;
- a critical XID event (`nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, set)`,
  drained with `nvmlEventSetWait(set, 0)` until NVML_ERROR_TIMEOUT): `xid`, with the XID, read
  at the check that drained it;
- `nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC) > 0`:
  `double-bit-ecc`;
- `nvmlDeviceGetRemappedRows(h)` pending or failed: `row-remap-pending` / `row-remap-failed`;
- `nvmlDeviceGetRetiredPagesPendingStatus(h) == NVML_FEATURE_ENABLED`: `page-retirement-pending`;
- `nvmlDeviceGetCurrentClocksThrottleReasons(h)` with a hardware slowdown bit (HwSlowdown,
  HwThermalSlowdown, HwPowerBrakeSlowdown): `hw-slowdown`.

A reading the GPU does not support (NVML_ERROR_NOT_SUPPORTED, as page retirement on GPUs that
remap rows) is skipped. The checks never block: the event set is drained with a zero timeout.
What bcd reports is those readings through bcd/recheck.py: a fault that cleared is reported until
a clean period has passed on the clock, and one that needs a reset is held.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from better_compute.bcd.recheck import CLEAN_SECONDS, HoldFile, Recheck
from better_compute.bcd.simnvml import simulated_nvml
from better_compute.core.clock import Clock, SystemClock
from better_compute.wire.protocol import GpuHealth, Inventory

__all__ = ["CHECK_SECONDS", "HEALTHY", "HealthWatch", "nvml_module", "with_health"]

CHECK_SECONDS = 5.0
HEALTHY = GpuHealth()
log = logging.getLogger(__name__)


class HealthWatch:
    """Reads every GPU's health through an NVML module (pynvml or the stand-in)."""

    def __init__(
        self,
        nvml: Any,
        *,
        clock: Clock | None = None,
        clean_seconds: float = CLEAN_SECONDS,
        holds: HoldFile | None = None,
    ) -> None:
        """`holds` keeps the reset holds across bcd's restarts (bcd/recheck.py); None keeps them in memory only."""
        self.nvml = nvml
        self.clock: Clock = clock or SystemClock()
        self.recheck = Recheck(clean_seconds)
        self.holds = holds
        if holds is not None:
            held, rebooted = holds.load()
            self.recheck.restore(held, rebooted=rebooted)
            if rebooted:  # the file's holds are this boot's clean periods now: they must not count again
                self._save()
        self._handles: dict[str, Any] = {}
        self._events: Any = None
        self._xids: dict[str, int] = {}
        self.health: dict[str, GpuHealth] = {}
        """The last check's answer, by GPU UUID."""

    def start(self) -> None:
        """nvmlInit, a handle per GPU, and an event set with each GPU's critical XIDs registered."""
        nvml = self.nvml
        nvml.nvmlInit()
        self._events = nvml.nvmlEventSetCreate()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            self._handles[uuid] = handle
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
            except nvml.NVMLError as exc:
                log.warning("GPU %s gives no XID events (%s): its XIDs are not watched", uuid, exc)

    def stop(self) -> None:
        nvml = self.nvml
        if self._events is not None:
            events, self._events = self._events, None
            nvml.nvmlEventSetFree(events)
            nvml.nvmlShutdown()

    def check(self) -> dict[str, GpuHealth]:
        """Every GPU's health as bcd reports it now (see the module docstring); also kept in `health`."""
        self._drain_events()
        readings = {uuid: self._read(uuid, handle) for uuid, handle in self._handles.items()}
        held = self.recheck.held()
        self.health = self.recheck.apply(readings, self.clock.now())
        if self.recheck.held() != held:
            self._save()
        return self.health

    def _save(self) -> None:
        if self.holds is None:
            return
        try:
            self.holds.save(self.recheck.held())
        except OSError as exc:
            log.warning("could not keep the GPU reset holds in %s: %s", self.holds.path, exc)

    def _drain_events(self) -> None:
        nvml = self.nvml
        while self._events is not None:
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError as exc:
                if exc.value != nvml.NVML_ERROR_TIMEOUT:
                    log.warning("reading NVML's XID events failed: %s", exc)
                return
            if not event.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            uuid = self._uuid_of(event.device)
            if uuid is not None:
                log.error("GPU %s: critical XID %d", uuid, event.eventData)
                self._xids[uuid] = int(event.eventData)

    def _uuid_of(self, handle: Any) -> str | None:
        try:
            return _text(self.nvml.nvmlDeviceGetUUID(handle))
        except self.nvml.NVMLError:
            return None

    def _read(self, uuid: str, handle: Any) -> GpuHealth:
        nvml = self.nvml
        try:
            xid = self._xids.pop(uuid, None)
            if xid is not None:
                nvml.nvmlDeviceGetUUID(handle)  # a lost GPU says so before its XID
                return GpuHealth(healthy=False, reason="xid", xid=xid)
            ecc = self._optional(
                lambda: nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
            if ecc:
                return GpuHealth(healthy=False, reason="double-bit-ecc", detail=f"{ecc} volatile uncorrected")
            rows = self._optional(lambda: nvml.nvmlDeviceGetRemappedRows(handle))
            if rows and rows[3]:
                return GpuHealth(healthy=False, reason="row-remap-failed")
            if rows and rows[2]:
                return GpuHealth(healthy=False, reason="row-remap-pending")
            pending = self._optional(lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
            if pending == nvml.NVML_FEATURE_ENABLED:
                return GpuHealth(healthy=False, reason="page-retirement-pending")
            reasons = self._optional(lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)) or 0
            slow = reasons & (
                nvml.nvmlClocksThrottleReasonHwSlowdown
                | nvml.nvmlClocksThrottleReasonHwThermalSlowdown
                | nvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
            )
            if slow:
                return GpuHealth(healthy=False, reason="hw-slowdown", detail=f"throttle reasons 0x{reasons:x}")
            return HEALTHY
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_GPU_IS_LOST:
                return GpuHealth(healthy=False, reason="gpu-lost")
            log.warning("reading GPU %s's health failed (%s); keeping its last health", uuid, exc)
            return self.health.get(uuid, HEALTHY)

    def _optional(self, read: Callable[[], Any]) -> Any:
        """The reading, or None where this GPU does not support it."""
        try:
            return read()
        except self.nvml.NVMLError as exc:
            if exc.value == self.nvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise

    async def watch(
        self,
        clock: Clock,
        on_change: Callable[[dict[str, GpuHealth]], Awaitable[None]],
        *,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        """Check every `check_seconds` on the clock; call `on_change` with every GPU's health when any changed."""
        self.clock = clock
        while True:
            try:
                self.start()
                break
            except self.nvml.NVMLError as exc:
                log.warning(
                    "NVML did not start for the GPU health watch (%s); trying again in %.0f s", exc, check_seconds
                )
                await clock.sleep(check_seconds)
        try:
            last = dict.fromkeys(self._handles, HEALTHY)
            while True:
                now = self.check()
                if now != last:
                    for uuid, health in now.items():
                        if health != last.get(uuid, HEALTHY):
                            log_health(uuid, health)
                    last = dict(now)
                    await on_change(now)
                await clock.sleep(check_seconds)
        finally:
            self.stop()


def nvml_module(env: Mapping[str, str], hostname: str) -> Any | None:
    """What bcd watches health through: the stand-in for BCD_SIMULATED_GPUS, else pynvml, else None."""
    spec = env.get("BCD_SIMULATED_GPUS")
    if spec:
        return simulated_nvml(hostname, spec)
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def with_health(inventory: Inventory, nvml: Any | None) -> Inventory:
    """The inventory with each GPU's health read once (`bcd inventory`); unchanged where NVML does not start."""
    if nvml is None or not inventory.gpus:
        return inventory
    watch = HealthWatch(nvml)
    try:
        watch.start()
        health = watch.check()
    except nvml.NVMLError as exc:
        log.warning("reading GPU health failed: %s", exc)
        return inventory
    finally:
        watch.stop()
    gpus = [gpu.model_copy(update={"health": health.get(gpu.uuid, gpu.health)}) for gpu in inventory.gpus]
    return inventory.model_copy(update={"gpus": gpus})


def log_health(uuid: str, health: GpuHealth) -> None:
    if health.healthy:
        log.info("GPU %s is healthy again", uuid)
    else:
        xid = f" {health.xid}" if health.xid is not None else ""
        log.error(
            "GPU %s is unhealthy: %s%s%s", uuid, health.reason, xid, f" ({health.detail})" if health.detail else ""
        )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
