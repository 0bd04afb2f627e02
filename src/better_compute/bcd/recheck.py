"""Recheck and return: from each check's NVML readings to the health bcd reports (issue 28, item 3).

A fault that clears by itself (a transient XID, an ECC count or a slowdown that went away) is still
reported, with `detail` saying so, until the GPU has read healthy for `clean_seconds` on bcd's clock
(default 10 minutes); a new fault meanwhile starts the count again. A fault that needs a reset (XID
48, 63, 64, 79 or 95, a lost GPU, a pending or failed row remap) is held, whatever the GPU reads
after it, until bcd sees the GPU reset or the machine rebooted, which it does not yet: such a GPU
stays out for the rest of this bcd's life, as NVIDIA's device plugin keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from better_compute.wire.protocol import GpuHealth

__all__ = ["CLEAN_SECONDS", "RESET_REASONS", "RESET_XIDS", "Recheck", "needs_reset"]

CLEAN_SECONDS = 600.0
RESET_XIDS = frozenset({48, 63, 64, 79, 95})
"""48 double-bit ECC, 63/64 row remapping pending/failed, 79 fallen off the bus, 95 uncontained ECC."""
RESET_REASONS = frozenset({"gpu-lost", "row-remap-pending", "row-remap-failed"})
HEALTHY = GpuHealth()


def needs_reset(health: GpuHealth) -> bool:
    """Whether this fault keeps the GPU out until it is reset (or the machine rebooted)."""
    return health.reason in RESET_REASONS or (health.reason == "xid" and health.xid in RESET_XIDS)


@dataclass
class _Fault:
    health: GpuHealth
    held: bool
    clean_since: datetime | None = None


class Recheck:
    """Per GPU: the last fault, whether it is held for a reset, and since when the GPU has read healthy."""

    def __init__(self, clean_seconds: float = CLEAN_SECONDS) -> None:
        self.clean = timedelta(seconds=clean_seconds)
        self._faults: dict[str, _Fault] = {}

    def apply(self, readings: dict[str, GpuHealth], now: datetime) -> dict[str, GpuHealth]:
        """What bcd reports for each GPU, given what NVML read at `now`."""
        return {uuid: self._one(uuid, reading, now) for uuid, reading in readings.items()}

    def _one(self, uuid: str, reading: GpuHealth, now: datetime) -> GpuHealth:
        fault = self._faults.get(uuid)
        if not reading.healthy:
            if fault is not None and fault.held:
                fault.clean_since = None
                return fault.health
            held = needs_reset(reading)
            reported = reading.model_copy(update={"detail": _held(reading)}) if held else reading
            self._faults[uuid] = _Fault(reported, held)
            return reported
        if fault is None:
            return HEALTHY
        if fault.held:
            return fault.health
        since = fault.clean_since or now
        if now - since >= self.clean:
            del self._faults[uuid]
            return HEALTHY
        fault.clean_since = since
        minutes = self.clean.total_seconds() / 60
        detail = f"rechecking: healthy since {since.isoformat()}, back after {minutes:g} clean minutes"
        return fault.health.model_copy(update={"detail": detail})


def _held(reading: GpuHealth) -> str:
    what = f"XID {reading.xid}" if reading.reason == "xid" else reading.reason
    return f"{what} needs a GPU reset or a reboot"
