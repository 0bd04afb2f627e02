"""Recheck and return: from each check's NVML readings to the health bcd reports (issue 28, item 3).

A fault that clears by itself (a transient XID, an ECC count or a slowdown that went away) is still
reported, with `detail` saying so and `rechecking_until` when it returns, until the GPU has read
healthy for `clean_seconds` on bcd's clock (default 10 minutes); a new fault meanwhile starts the count
again. A fault that needs a reset (XID 48, 63, 64, 79 or 95, a lost GPU, a pending or failed row
remap) is held, whatever the GPU reads after it (reported with `reset_needed`), until bcd sees the
GPU reset or the machine rebooted; then the clean period applies.

bcd sees a reset in what only a reset clears: while a fault is held, a reading of a GPU lost, a
volatile double-bit ECC count, or a pending or failed row remap is evidence that the fault is still
there (NVML: volatile ECC counts reset when the driver loads the GPU, a pending remap is applied at
the next reset, a lost GPU answers again only after one); a healthy reading after such evidence is a
reset. A held XID whose GPU never showed that evidence stays held until the machine reboots: nothing
bcd can read tells it that GPU was reset. bcd keeps its holds in its state directory with the
machine's boot id (`HoldFile`), so a restarted bcd keeps them, and one that finds another boot id
puts them through the clean period instead.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pydantic

from better_compute.wire.protocol import GpuHealth

__all__ = ["BOOT_ID", "CLEAN_SECONDS", "RESET_REASONS", "RESET_XIDS", "HoldFile", "Recheck", "needs_reset"]

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
"""Linux's id of this boot: a new one after every reboot."""
log = logging.getLogger(__name__)

CLEAN_SECONDS = 600.0
RESET_XIDS = frozenset({48, 63, 64, 79, 95})
"""48 double-bit ECC, 63/64 row remapping pending/failed, 79 fallen off the bus, 95 uncontained ECC."""
RESET_REASONS = frozenset({"gpu-lost", "row-remap-pending", "row-remap-failed"})
STILL_THERE = RESET_REASONS | {"double-bit-ecc"}
"""The readings that only a GPU reset (or a reboot) clears: while one is read, a held fault is still there."""
HEALTHY = GpuHealth()


def needs_reset(health: GpuHealth) -> bool:
    """Whether this fault keeps the GPU out until it is reset (or the machine rebooted)."""
    return health.reason in RESET_REASONS or (health.reason == "xid" and health.xid in RESET_XIDS)


@dataclass
class _Fault:
    health: GpuHealth
    held: bool
    clean_since: datetime | None = None
    still_there: bool = False
    """A held fault: whether a reading since it began showed what only a reset clears (STILL_THERE)."""


class Recheck:
    """Per GPU: the last fault, whether it is held for a reset, and since when the GPU has read healthy."""

    def __init__(self, clean_seconds: float = CLEAN_SECONDS) -> None:
        self.clean = timedelta(seconds=clean_seconds)
        self._faults: dict[str, _Fault] = {}

    def held(self) -> dict[str, GpuHealth]:
        """The faults held for a reset, by GPU."""
        return {uuid: fault.health for uuid, fault in self._faults.items() if fault.held}

    def restore(self, held: dict[str, GpuHealth], *, rebooted: bool) -> None:
        """Take the holds a previous bcd kept; after a reboot they go through the clean period instead."""
        for uuid, health in held.items():
            if rebooted:
                detail = "held before a reboot: rechecking"
                update = {"detail": detail, "reset_needed": False}
                self._faults[uuid] = _Fault(health.model_copy(update=update), held=False)
            else:  # a hold kept by a bcd from before reset_needed was reported says it too
                self._faults[uuid] = _Fault(health.model_copy(update={"reset_needed": True}), held=True)

    def apply(self, readings: dict[str, GpuHealth], now: datetime) -> dict[str, GpuHealth]:
        """What bcd reports for each GPU, given what NVML read at `now`."""
        return {uuid: self._one(uuid, reading, now) for uuid, reading in readings.items()}

    def _one(self, uuid: str, reading: GpuHealth, now: datetime) -> GpuHealth:
        fault = self._faults.get(uuid)
        if not reading.healthy:
            if fault is not None and fault.held:
                fault.clean_since = None
                fault.still_there = fault.still_there or reading.reason in STILL_THERE
                return fault.health
            held = needs_reset(reading)
            reported = reading.model_copy(update={"detail": _held(reading), "reset_needed": True}) if held else reading
            self._faults[uuid] = _Fault(reported, held, still_there=held and reading.reason in STILL_THERE)
            return reported
        if fault is None:
            return HEALTHY
        if fault.held:
            if not fault.still_there:
                return fault.health
            # what only a reset clears has cleared: the GPU was reset, and the clean period applies
            log.info("GPU %s was reset: its held fault goes through the clean period", uuid)
            fault.held = False
        since = fault.clean_since or now
        if now - since >= self.clean:
            del self._faults[uuid]
            return HEALTHY
        fault.clean_since = since
        minutes = self.clean.total_seconds() / 60
        detail = f"rechecking: healthy since {since.isoformat()}, back after {minutes:g} clean minutes"
        update = {"detail": detail, "reset_needed": False, "rechecking_until": since + self.clean}
        return fault.health.model_copy(update=update)


def _held(reading: GpuHealth) -> str:
    what = f"XID {reading.xid}" if reading.reason == "xid" else reading.reason
    return f"{what} needs a GPU reset or a reboot"


class HoldFile:
    """Where bcd keeps its reset holds across its own restarts: `gpu-holds.json` in its state directory,
    stamped with the boot id, so a reboot (a new boot id) is what lets them go."""

    def __init__(self, path: Path, boot_id: str) -> None:
        self.path = path
        self.boot_id = boot_id

    @classmethod
    def in_state_dir(cls, state_dir: Path, boot_id_file: Path = BOOT_ID) -> HoldFile | None:
        """The state directory's hold file, or None where the boot id cannot be read (no holds are kept)."""
        try:
            boot_id = boot_id_file.read_text().strip()
        except OSError:
            return None
        return cls(state_dir / "gpu-holds.json", boot_id) if boot_id else None

    def load(self) -> tuple[dict[str, GpuHealth], bool]:
        """The holds on record and whether the machine rebooted since; nothing when there is no usable file."""
        try:
            data = json.loads(self.path.read_text())
            held = {str(uuid): GpuHealth.model_validate(h) for uuid, h in dict(data["held"]).items()}
            return held, data["bootId"] != self.boot_id
        except FileNotFoundError:
            return {}, False
        except (OSError, ValueError, KeyError, TypeError, pydantic.ValidationError) as exc:
            log.warning("ignoring %s: %s", self.path, exc)
            return {}, False

    def save(self, held: dict[str, GpuHealth]) -> None:
        data = {"bootId": self.boot_id, "held": {u: h.model_dump(mode="json") for u, h in sorted(held.items())}}
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(data))
        temporary.replace(self.path)
