"""A stand-in for pynvml at the library's own boundary, answering from a simulated device table.

`BCD_SIMULATED_GPUS=8xH100` gives bcd this object where a real node gives it the `pynvml`
module: the same functions, constants and error class that bcd's health watch (bcd/health.py)
calls, so the code that watches a real GPU is the code the tests run. The names and values
follow nvidia-ml-py's pynvml.py (docs/bcd.md, "GPU health", cites them).

In the emulated world each simulated machine owns its table (the kubelet simulator makes one per
machine and hands it to that machine's bcd), and a test or the demo injects a fault into one GPU
(`xid`, `ecc`, `lost`, `remap_pending`, `slowdown`) or clears it through the kubelet
(`gpu_fault`, `clear_gpu_fault`). A bcd run on its own with BCD_SIMULATED_GPUS reads the
process's table for its hostname (`simulated_nvml(hostname)`).
An injected XID is queued as an event for every event set that registered
`nvmlEventTypeXidCriticalError` on that GPU, as NVML does; the other faults are the GPU's
readings until cleared.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from better_compute.bcd.inventory import simulated_gpus

__all__ = ["SimulatedGpu", "SimulatedNvml", "forget_simulated_nvml", "simulated_nvml"]

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlClocksThrottleReasonGpuIdle = 0x0000000000000001
nvmlClocksThrottleReasonHwSlowdown = 0x0000000000000008
nvmlClocksThrottleReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x0000000000000080

_ERROR_TEXT = {
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    """pynvml's error: `value` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML error {self.value}")


@dataclass
class SimulatedGpu:
    """One GPU's row in the table: what NVML would read now."""

    index: int
    uuid: str
    name: str
    memory_bytes: int
    lost: bool = False
    volatile_uncorrected_ecc: int = 0
    retired_pages_pending: bool = False
    remap_pending: bool = False
    remap_failed: bool = False
    throttle_reasons: int = 0


@dataclass(frozen=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclass
class _EventData:
    """c_nvmlEventData_t's fields: the device handle, the event type and its data (the XID)."""

    device: SimulatedGpu
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _EventSet:
    registered: dict[str, int] = field(default_factory=dict)
    queue: list[_EventData] = field(default_factory=list)


class SimulatedNvml:
    """The pynvml calls bcd makes, over a device table; thread-safe, since NVML is."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    nvmlClocksThrottleReasonGpuIdle = nvmlClocksThrottleReasonGpuIdle
    nvmlClocksThrottleReasonHwSlowdown = nvmlClocksThrottleReasonHwSlowdown
    nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksThrottleReasonHwThermalSlowdown
    nvmlClocksThrottleReasonHwPowerBrakeSlowdown = nvmlClocksThrottleReasonHwPowerBrakeSlowdown

    def __init__(self, gpus: list[SimulatedGpu], driver_version: str = "550.90.07") -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self._sets: list[_EventSet] = []
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: str, hostname: str) -> SimulatedNvml:
        """The table for `BCD_SIMULATED_GPUS=spec` on this host: the GPUs `simulated_gpus` names."""
        return cls(
            [
                SimulatedGpu(g.index, g.uuid, g.model, (g.memory_mib or 0) * 1024 * 1024)
                for g in simulated_gpus(spec, hostname)
            ]
        )

    # -- faults (tests, the demo, the emulators) ------------------------------------------

    def gpu(self, index: int) -> SimulatedGpu:
        return self.gpus[index]

    def inject(
        self,
        index: int,
        *,
        xid: int | None = None,
        ecc: int | None = None,
        lost: bool | None = None,
        remap_pending: bool | None = None,
        slowdown: bool | None = None,
    ) -> None:
        """Give GPU `index` a fault: an XID event, a volatile double-bit ECC count, a lost GPU, ..."""
        with self._lock:
            gpu = self.gpus[index]
            if xid is not None:
                for events in self._sets:
                    if events.registered.get(gpu.uuid, 0) & nvmlEventTypeXidCriticalError:
                        events.queue.append(_EventData(gpu, nvmlEventTypeXidCriticalError, xid))
            if ecc is not None:
                gpu.volatile_uncorrected_ecc = ecc
            if lost is not None:
                gpu.lost = lost
            if remap_pending is not None:
                gpu.remap_pending = remap_pending
            if slowdown is not None:
                gpu.throttle_reasons = nvmlClocksThrottleReasonHwSlowdown if slowdown else 0

    def clear(self, index: int) -> None:
        """GPU `index` reads healthy again (as after a reset: volatile counters zero, the GPU back)."""
        with self._lock:
            gpu = self.gpus[index]
            gpu.lost = gpu.retired_pages_pending = gpu.remap_pending = gpu.remap_failed = False
            gpu.volatile_uncorrected_ecc = gpu.throttle_reasons = 0

    # -- the pynvml API -------------------------------------------------------------------

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimulatedGpu:
        return self._alive(self.gpus[index])

    def nvmlDeviceGetUUID(self, handle: SimulatedGpu) -> str:
        return self._alive(handle).uuid

    def nvmlDeviceGetName(self, handle: SimulatedGpu) -> str:
        return self._alive(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: SimulatedGpu) -> _Memory:
        total = self._alive(handle).memory_bytes
        return _Memory(total=total, free=total, used=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: SimulatedGpu, error_type: int, counter_type: int) -> int:
        gpu = self._alive(handle)
        if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED and counter_type == NVML_VOLATILE_ECC:
            return gpu.volatile_uncorrected_ecc
        return 0

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: SimulatedGpu) -> int:
        gpu = self._alive(handle)
        return NVML_FEATURE_ENABLED if gpu.retired_pages_pending else NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: SimulatedGpu) -> tuple[int, int, int, int]:
        gpu = self._alive(handle)
        return (0, 1 if gpu.remap_pending else 0, int(gpu.remap_pending), int(gpu.remap_failed))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: SimulatedGpu) -> int:
        return self._alive(handle).throttle_reasons

    def nvmlEventSetCreate(self) -> _EventSet:
        events = _EventSet()
        with self._lock:
            self._sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle: SimulatedGpu, event_types: int, event_set: _EventSet) -> None:
        gpu = self._alive(handle)
        with self._lock:
            event_set.registered[gpu.uuid] = event_set.registered.get(gpu.uuid, 0) | event_types

    def nvmlEventSetWait(self, event_set: _EventSet, timeoutms: int) -> _EventData:
        """The next queued event; NVML_ERROR_TIMEOUT at once when none is (the stand-in never blocks)."""
        with self._lock:
            if event_set.queue:
                return event_set.queue.pop(0)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        with self._lock:
            if event_set in self._sets:
                self._sets.remove(event_set)

    @staticmethod
    def _alive(handle: SimulatedGpu) -> SimulatedGpu:
        if handle.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return handle


_TABLES: dict[str, SimulatedNvml] = {}
_TABLES_LOCK = threading.Lock()


def simulated_nvml(hostname: str, spec: str | None = None) -> SimulatedNvml:
    """This host's simulated NVML, made from `spec` (BCD_SIMULATED_GPUS) the first time it is asked for.

    One table per hostname in the process, so a test or emulator injects into the node a bcd watches,
    and a restarted bcd on that host reads the same GPUs (faults included)."""
    with _TABLES_LOCK:
        table = _TABLES.get(hostname)
        if spec is not None:
            wanted = [(g.uuid, g.model) for g in simulated_gpus(spec, hostname)]
            if table is None or [(g.uuid, g.name) for g in table.gpus] != wanted:
                table = _TABLES[hostname] = SimulatedNvml.from_spec(spec, hostname)
        if table is None:
            raise KeyError(f"no simulated GPUs on host {hostname!r}")
        return table


def forget_simulated_nvml(hostname: str | None = None) -> None:
    """Drop one host's table (or all): the next bcd there starts with healthy GPUs."""
    with _TABLES_LOCK:
        if hostname is None:
            _TABLES.clear()
        else:
            _TABLES.pop(hostname, None)
