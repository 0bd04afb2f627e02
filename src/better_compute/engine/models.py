"""The work-items table: one row per (kind, key), with its due time and its lease.

A row with `lock_token` NULL waits for `due_at` (NULL: at rest, done or stopped by a
permanent error). A claim sets the token, the owner and the lease expiry, and clears
`due_at`: an enqueue during the run sets it again, and the completion keeps the
earlier of that and its own next time, so a change made while the item ran is never
lost. Once the lease has expired any worker may claim the item again, and the old
owner's completion no longer matches the token. `attempts` counts consecutive
failures and picks the backoff delay.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.store import Base, UTCDateTime

__all__ = ["WorkItem"]


class WorkItem(Base):
    __tablename__ = "work_items"
    __table_args__ = (
        UniqueConstraint("kind", "key", name="uq_work_items_kind_key"),
        Index("ix_work_items_due_at", "due_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(255))
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lock_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
