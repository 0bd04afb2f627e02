"""The compute tables. Only this package reads or writes them; others call its functions.

The guarantee that one device is never given to two reservations sits in the schema:
`compute_devices.reservation_id` is the one place a device's active holder is kept, and
booking sets it with `UPDATE ... WHERE reservation_id IS NULL`, so a device row can name
at most one holder whatever the interleaving. Reservations keep `device_ids` as history.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.store import Base, UTCDateTime

__all__ = ["DeviceRow", "ListVersionRow", "NodeRow", "PoolRow", "QuotaRow", "ReservationRow", "SiteRow"]


class SiteRow(Base):
    __tablename__ = "compute_sites"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"))
    name: Mapped[str] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(32))
    region: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class PoolRow(Base):
    __tablename__ = "compute_pools"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"))
    name: Mapped[str] = mapped_column(String(63))
    site_id: Mapped[str] = mapped_column(ForeignKey("compute_sites.id"))
    pool_class: Mapped[str] = mapped_column(String(64))
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    policy: Mapped[dict[str, Any]] = mapped_column(JSON())
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class NodeRow(Base):
    __tablename__ = "compute_nodes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"))
    pool_id: Mapped[str] = mapped_column(ForeignKey("compute_pools.id"))
    name: Mapped[str] = mapped_column(String(253))
    state: Mapped[str] = mapped_column(String(16))
    connected: Mapped[bool] = mapped_column(Boolean())
    spot: Mapped[bool] = mapped_column(Boolean())
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON())
    system_labels: Mapped[dict[str, str]] = mapped_column(JSON())
    inventory: Mapped[dict[str, Any]] = mapped_column(JSON())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    machine_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """The one machine this node is (a Kubernetes Node's uid, proven at join); None until one is proven."""


class DeviceRow(Base):
    __tablename__ = "compute_devices"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("compute_nodes.id"))
    index: Mapped[int] = mapped_column("idx", Integer())
    uuid: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    present: Mapped[bool] = mapped_column(Boolean())
    health_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Why bcd reports the GPU unhealthy (None: healthy); an unhealthy GPU is not `present`, so no booking takes it."""
    health_xid: Mapped[int | None] = mapped_column(Integer(), nullable=True)
    health_state: Mapped[str] = mapped_column(String(16), default="healthy", server_default="healthy")
    """models.GpuState: `healthy`, `unhealthy`, `rechecking` or `reset-needed`."""
    health_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    health_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reservation_id: Mapped[str | None] = mapped_column(ForeignKey("compute_reservations.id"), nullable=True)


class ReservationRow(Base):
    __tablename__ = "compute_reservations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"))
    pool_id: Mapped[str] = mapped_column(ForeignKey("compute_pools.id"))
    node_id: Mapped[str] = mapped_column(ForeignKey("compute_nodes.id"))
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpu_count: Mapped[int] = mapped_column(Integer())
    device_ids: Mapped[list[str]] = mapped_column(JSON())
    binding: Mapped[str] = mapped_column(String(32))
    spot: Mapped[bool] = mapped_column(Boolean())
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class QuotaRow(Base):
    __tablename__ = "compute_quotas"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_limit: Mapped[int | None] = mapped_column(Integer(), nullable=True)
    used: Mapped[int] = mapped_column(Integer())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ListVersionRow(Base):
    """A tenant's list version: the database's own triggers move it in every transaction that writes a row
    its pool, node or reservation lists show (migration compute_0008). Written by nothing else."""

    __tablename__ = "compute_list_versions"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger())
