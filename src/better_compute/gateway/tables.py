"""The gateway's tables: join tokens and node credentials (hashes only) and node sessions.

Other modules' ids (tenant, pool, node) are plain indexed strings: the gateway reaches
compute through its functions, never its tables.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.store import Base, UTCDateTime

__all__ = ["JoinTokenRow", "NodeCredentialRow", "NodeSessionRow"]


class JoinTokenRow(Base):
    """A join token: its SHA-256, how many joins it allows and has had, and whether it is revoked."""

    __tablename__ = "gateway_join_tokens"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    pool_id: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    uses_allowed: Mapped[int] = mapped_column(Integer())
    uses: Mapped[int] = mapped_column(Integer())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class NodeCredentialRow(Base):
    """The one live credential of a node (a new join replaces it)."""

    __tablename__ = "gateway_node_credentials"

    node_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    pool_id: Mapped[str] = mapped_column(String(64), index=True)
    credential_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class NodeSessionRow(Base):
    """A node's gateway session, so that any replica can say whether the node is connected.

    `session_id` fences writes: a replica whose session was replaced by a newer one (the node
    reconnected elsewhere) cannot mark the node disconnected.
    """

    __tablename__ = "gateway_node_sessions"

    node_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(64))
    replica: Mapped[str] = mapped_column(String(128))
    connected: Mapped[bool] = mapped_column(Boolean(), index=True)
    connected_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())
    disconnected_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    close_reason: Mapped[str | None] = mapped_column(String(256), nullable=True)
