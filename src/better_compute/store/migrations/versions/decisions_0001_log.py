"""decisions: the decision log (one row per decision about a node, a GPU, a reservation, a join token or a plan).

Revision ID: decisions_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "decisions_0001"
down_revision = None
branch_labels = ("decisions",)
depends_on = ("iam_0001",)


def upgrade() -> None:
    op.create_table(
        "decisions_log",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(48), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("pool_id", sa.String(64), nullable=True),
        sa.Column("node_id", sa.String(64), nullable=True),
        sa.Column("node_name", sa.String(253), nullable=True),
        sa.Column("reservation_id", sa.String(64), nullable=True),
        sa.Column("gpu_ids", sa.JSON(), nullable=False),
        sa.Column("principal", sa.String(64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_decisions_log"),
        sa.UniqueConstraint("id", name="uq_decisions_log_id"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_decisions_log_tenant_id_iam_tenants"),
    )
    op.create_index("ix_decisions_log_tenant_id_at", "decisions_log", ["tenant_id", "at", "seq"])
    op.create_index("ix_decisions_log_at", "decisions_log", ["at"])
    op.create_index("ix_decisions_log_reservation_id", "decisions_log", ["reservation_id"])
    op.create_index("ix_decisions_log_node_id", "decisions_log", ["node_id"])


def downgrade() -> None:
    op.drop_table("decisions_log")
