"""gateway: join tokens and node credentials (stored as SHA-256 only), node sessions.

Revision ID: gateway_0001
Revises:
"""

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "gateway_0001"
down_revision = None
branch_labels = ("gateway",)
depends_on = None


def _ts(name: str, nullable: bool = False) -> "sa.Column[datetime]":
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "gateway_join_tokens",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("uses_allowed", sa.Integer(), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False),
        _ts("created_at"),
        _ts("last_used_at", nullable=True),
        _ts("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_gateway_join_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_gateway_join_tokens_token_hash"),
    )
    op.create_index("ix_gateway_join_tokens_tenant_id", "gateway_join_tokens", ["tenant_id"])
    op.create_index("ix_gateway_join_tokens_pool_id", "gateway_join_tokens", ["pool_id"])
    op.create_table(
        "gateway_node_credentials",
        sa.Column("node_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("credential_hash", sa.String(64), nullable=False),
        sa.Column("token_id", sa.String(64), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("node_id", name="pk_gateway_node_credentials"),
        sa.UniqueConstraint("credential_hash", name="uq_gateway_node_credentials_credential_hash"),
    )
    op.create_index("ix_gateway_node_credentials_tenant_id", "gateway_node_credentials", ["tenant_id"])
    op.create_index("ix_gateway_node_credentials_pool_id", "gateway_node_credentials", ["pool_id"])
    op.create_table(
        "gateway_node_sessions",
        sa.Column("node_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("replica", sa.String(128), nullable=False),
        sa.Column("connected", sa.Boolean(), nullable=False),
        _ts("connected_at"),
        _ts("last_heartbeat_at"),
        _ts("disconnected_at", nullable=True),
        sa.Column("close_reason", sa.String(256), nullable=True),
        sa.PrimaryKeyConstraint("node_id", name="pk_gateway_node_sessions"),
    )
    op.create_index("ix_gateway_node_sessions_connected", "gateway_node_sessions", ["connected"])


def downgrade() -> None:
    op.drop_table("gateway_node_sessions")
    op.drop_table("gateway_node_credentials")
    op.drop_table("gateway_join_tokens")
