"""GPU health as operators see it: the quarantined GPUs (doctor's `compute.gpu-quarantined`) and the
Prometheus metrics of quarantines and returns (counted as the inventory changes a GPU's state) and of
the GPUs out now (gauges read from the store when `/metrics` is scraped, so every replica agrees)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from prometheus_client import Counter, Gauge
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.findings import Finding

from .models import kubernetes_node_name
from .tables import DeviceRow, NodeRow, PoolRow

__all__ = [
    "QUARANTINED",
    "QUARANTINES",
    "RETURNS",
    "UNHEALTHY",
    "Quarantined",
    "count_change",
    "quarantine_findings",
    "quarantined_gpus",
    "refresh_gauges",
]

QUARANTINES = Counter(
    "better_compute_gpu_quarantines", "GPUs taken off sale because bcd reported them unhealthy, by reason.", ["reason"]
)
RETURNS = Counter("better_compute_gpu_returns", "GPUs back on sale after bcd reported them healthy again.")
UNHEALTHY = Gauge(
    "better_compute_gpus_unhealthy",
    "GPUs of live nodes whose fault is there now (unhealthy or reset-needed, not rechecking), by reason.",
    ["reason"],
)
QUARANTINED = Gauge(
    "better_compute_gpus_quarantined",
    "GPUs of live nodes off sale for their health now, by state (unhealthy, rechecking, reset-needed).",
    ["state"],
)
STATES = ("unhealthy", "rechecking", "reset-needed")


def count_change(before: str | None, after: str, reason: str | None) -> None:
    """Count a GPU's move between healthy and not (`before` None: a GPU seen for the first time)."""
    if after != "healthy" and before in (None, "healthy"):
        QUARANTINES.labels(reason=reason or "unknown").inc()
    elif after == "healthy" and before not in (None, "healthy"):
        RETURNS.inc()


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A GPU off sale for its health, with its node and pool to name."""

    node_id: str
    node_name: str
    pool: str
    index: int
    uuid: str
    state: str
    reason: str | None
    xid: int | None
    since: datetime | None
    until: datetime | None


async def quarantined_gpus(session: AsyncSession, *, tenant_id: str | None = None) -> list[Quarantined]:
    """The GPUs of live nodes that are not healthy (one tenant's, or all), by pool, node and index."""
    query = (
        select(NodeRow.id, NodeRow.name, NodeRow.inventory["os"], PoolRow.name, DeviceRow)
        .join(NodeRow, NodeRow.id == DeviceRow.node_id)
        .join(PoolRow, PoolRow.id == NodeRow.pool_id)
        .where(DeviceRow.health_state != "healthy", NodeRow.state != "retired")
        .order_by(PoolRow.name, NodeRow.name, DeviceRow.index)
    )
    if tenant_id is not None:
        query = query.where(NodeRow.tenant_id == tenant_id)
    found = []
    for node_id, name, os_section, pool, device in (await session.execute(query)).all():
        found.append(
            Quarantined(
                node_id=node_id,
                node_name=kubernetes_node_name(os_section) or name,
                pool=pool,
                index=device.index,
                uuid=device.uuid,
                state=device.health_state,
                reason=device.health_reason,
                xid=device.health_xid,
                since=device.health_since,
                until=device.health_until,
            )
        )
    return found


def quarantine_findings(gpus: list[Quarantined]) -> list[Finding]:
    """doctor's `compute.gpu-quarantined`, one a GPU: its node, GPU, reason and what to do."""
    findings = []
    for gpu in gpus:
        why = f"{gpu.reason}{f' {gpu.xid}' if gpu.xid is not None else ''}"
        since = f" since {gpu.since.isoformat()}" if gpu.since is not None else ""
        if gpu.state == "reset-needed":
            todo = "it stays off sale until the GPU is reset or the machine rebooted (or replaced)"
        elif gpu.state == "rechecking" and gpu.until is not None:
            todo = f"the fault cleared; it returns at {gpu.until.isoformat()} if it reads healthy until then"
        else:
            todo = "it returns once the fault clears and a clean period (10 minutes by default) passes"
        findings.append(
            Finding(
                "compute.gpu-quarantined",
                "warning",
                f"pool {gpu.pool}: node {gpu.node_name} ({gpu.node_id}) GPU {gpu.index} ({gpu.uuid}) is {gpu.state}: "
                f"{why}{since}; it takes no booking (a reservation holding it reads degraded); {todo}",
            )
        )
    return findings


async def refresh_gauges(session: AsyncSession) -> None:
    """Set the gauges from the store: every reason and state present now, the others zero."""
    query = (
        select(DeviceRow.health_state, DeviceRow.health_reason, func.count())
        .join(NodeRow, NodeRow.id == DeviceRow.node_id)
        .where(DeviceRow.health_state != "healthy", NodeRow.state != "retired")
        .group_by(DeviceRow.health_state, DeviceRow.health_reason)
    )
    by_state = dict.fromkeys(STATES, 0)
    by_reason: dict[str, int] = {}
    for state, reason, count in (await session.execute(query)).all():
        by_state[state] = by_state.get(state, 0) + count
        if state != "rechecking":  # a rechecking GPU's fault has cleared: it is out, not unhealthy
            by_reason[reason or "unknown"] = by_reason.get(reason or "unknown", 0) + count
    UNHEALTHY.clear()
    for reason, count in by_reason.items():
        UNHEALTHY.labels(reason=reason).set(count)
    for state, count in by_state.items():
        QUARANTINED.labels(state=state).set(count)
