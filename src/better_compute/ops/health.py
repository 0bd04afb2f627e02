"""Per-GPU health as `nodes get` and `reservations get` show it (CLI and HTTP alike), and the GPU gauges
`/metrics` reads from the store when it is scraped.

A GPU's `health` is its state (`healthy`, `unhealthy`, `rechecking`, `reset-needed`; docs/operations.md
says what each means), the reason and XID bcd gave, `since` (when it entered this state, on the control
plane's clock; null if it did before the control plane kept it) and `until` (while rechecking: when it
returns, if it reads healthy until then).
"""

from __future__ import annotations

from better_compute.compute.health import refresh_gauges
from better_compute.compute.models import Device
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["device_view", "gpu_health_view", "refresh_gpu_gauges"]


def gpu_health_view(device: Device) -> View:
    return {
        "state": device.health_state,
        "reason": device.health_reason,
        "xid": device.health_xid,
        "since": iso(device.health_since),
        "until": iso(device.health_until),
    }


def device_view(device: Device) -> View:
    """One GPU of a node: where it is, whether it is there and booked, and its health."""
    return {
        "index": device.index,
        "uuid": device.uuid,
        "model": device.model,
        "present": device.present,
        "reservationId": device.reservation_id,
        "health": gpu_health_view(device),
    }


async def refresh_gpu_gauges(compute: Compute) -> None:
    """Set the unhealthy and quarantined GPU gauges from the store (every tenant's, counted, never named)."""
    async with compute.db.read() as session:
        await refresh_gauges(session)
