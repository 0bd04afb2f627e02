"""The decision log's one table. Only this package reads or writes it.

It names the objects an event concerns by id and keeps no foreign key to them: the log
outlives what it tells of (a retired node, an archived pool), and a delete elsewhere must
never wait on it. The tenant is a foreign key: it is whose event it is. `seq` (the
database's own counter) orders the events of one moment as they were recorded: a
transaction that cordons a node and then ends its bookings reads back in that order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.store import Base, UTCDateTime

__all__ = ["DecisionRow"]


class DecisionRow(Base):
    __tablename__ = "decisions_log"
    __table_args__ = (
        Index("ix_decisions_log_tenant_id_at", "tenant_id", "at", "seq"),
        Index("ix_decisions_log_at", "at"),
        Index("ix_decisions_log_reservation_id", "reservation_id"),
        Index("ix_decisions_log_node_id", "node_id"),
    )

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    id: Mapped[str] = mapped_column(String(64), unique=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"))
    kind: Mapped[str] = mapped_column(String(48))
    reason: Mapped[str] = mapped_column(String(1024))
    pool_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    node_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    node_name: Mapped[str | None] = mapped_column(String(253), nullable=True)
    reservation_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gpu_ids: Mapped[list[str]] = mapped_column(JSON())
    """The GPUs' UUIDs (as bcd and nvidia-smi name them)."""
    principal: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Who decided: an API key's id; None for the system's own decisions."""
    details: Mapped[dict[str, Any]] = mapped_column(JSON())
