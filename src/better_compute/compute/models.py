"""What the compute services hand out: frozen values, never live rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

__all__ = [
    "SPOT_LABEL",
    "Assignment",
    "DegradedGpu",
    "Device",
    "Held",
    "Node",
    "NodeState",
    "Pool",
    "PoolState",
    "QuotaUsage",
    "Reservation",
    "ReservationState",
    "Site",
    "gpu_fault",
    "kubernetes_node_name",
]

NodeState = Literal["joining", "ready", "cordoned", "retired"]
PoolState = Literal["active", "archiving", "archived"]
ReservationState = Literal["active", "released", "preempted", "ended"]

SPOT_LABEL = "bc.dev/capacity"
"""The system label whose value `spot` marks a node the provider may reclaim."""


@dataclass(frozen=True, slots=True)
class Site:
    id: str
    tenant_id: str
    name: str
    kind: str
    region: str | None


@dataclass(frozen=True, slots=True)
class Pool:
    id: str
    tenant_id: str
    name: str
    site_id: str
    pool_class: str
    gpu_model: str | None
    policy: dict[str, Any]
    state: PoolState
    created_at: datetime
    updated_at: datetime


GpuState = Literal["healthy", "unhealthy", "rechecking", "reset-needed"]
"""A GPU's health: `unhealthy` (a fault now), `rechecking` (the fault cleared; back after a clean period),
`reset-needed` (held until the GPU is reset or the machine rebooted); all but `healthy` take no booking."""


@dataclass(frozen=True, slots=True)
class Device:
    id: str
    node_id: str
    index: int
    uuid: str
    model: str
    present: bool
    reservation_id: str | None
    health_reason: str | None = None
    """Why bcd reports this GPU unhealthy (bcd/health.py's reasons); None while it is healthy."""
    health_xid: int | None = None
    health_state: GpuState = "healthy"
    health_since: datetime | None = None
    """When the GPU entered this state (and reason), on the control plane's clock; None: before it was kept."""
    health_until: datetime | None = None
    """While `rechecking`: when bcd returns the GPU, after its clean period (on bcd's clock)."""

    @property
    def healthy(self) -> bool:
        return self.health_reason is None


def gpu_fault(reason: str | None, xid: int | None) -> str:
    """A GPU's fault as people read it, in every message that names one: `gpu-lost, XID 79`, `double-bit-ecc`."""
    return f"{reason}{'' if xid is None else f', XID {xid}'}"


@dataclass(frozen=True, slots=True)
class DegradedGpu:
    """A GPU of a reservation that bcd reports unhealthy: the tenant keeps the reservation's other GPUs."""

    uuid: str
    index: int
    reason: str
    xid: int | None


def kubernetes_node_name(os_section: Any) -> str | None:
    """From an inventory's `os` section: the Kubernetes Node name bcd reported, else the hostname."""
    os_section = os_section or {}
    name = os_section.get("kubernetesNodeName") or os_section.get("hostname")
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    pool_id: str
    tenant_id: str
    name: str
    state: NodeState
    connected: bool
    last_seen_at: datetime | None
    labels: dict[str, str]
    system_labels: dict[str, str]
    inventory: dict[str, Any]
    devices: tuple[Device, ...] = field(default=())
    created_at: datetime | None = None
    machine_id: str | None = None
    """The machine the node is bound to (a Kubernetes Node's uid), once a join proved one."""

    @property
    def spot(self) -> bool:
        return self.system_labels.get(SPOT_LABEL) == "spot"

    @property
    def kubernetes_node_name(self) -> str | None:
        """The Kubernetes Node this node runs on, as bcd reported it: the Node name, else the hostname."""
        return kubernetes_node_name(self.inventory.get("os"))

    @property
    def competing_device_plugins(self) -> tuple[str, ...]:
        """The other device plugins bcd reports on its node: while any is there, the node's GPUs take no booking."""
        return tuple(str(name) for name in self.inventory.get("competingDevicePlugins") or [])


@dataclass(frozen=True, slots=True)
class Reservation:
    id: str
    tenant_id: str
    pool_id: str
    node_id: str
    device_ids: tuple[str, ...]
    gpu_model: str
    gpu_count: int
    binding: str
    spot: bool
    state: ReservationState
    created_at: datetime
    ended_at: datetime | None
    degraded_gpus: tuple[DegradedGpu, ...] = ()
    """The reservation's GPUs that bcd reports unhealthy now (active reservations only)."""

    @property
    def health(self) -> Literal["healthy", "degraded"]:
        """`degraded` while any of its GPUs is unhealthy (the state stays `active`: the rest are still held)."""
        return "degraded" if self.degraded_gpus else "healthy"


class Held(NamedTuple):
    """One reservation a node must hold, and the GPUs (by uuid) it holds them on."""

    reservation_id: str
    device_uuids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """What bcd on one node must do now: advertise exactly these devices, carry these labels."""

    node_id: str
    reservations: tuple[Held, ...]
    system_labels: dict[str, str]
    cordoned: bool


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    tenant_id: str
    gpu_model: str
    limit: int | None
    used: int
