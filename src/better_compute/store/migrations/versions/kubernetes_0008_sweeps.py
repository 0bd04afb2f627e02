"""kubernetes: the last orphan sweep of each provider account, which doctor reports.

Revision ID: kubernetes_0008
Revises: kubernetes_0007
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0008"
down_revision = "kubernetes_0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kubernetes_sweeps",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("account", sa.String(63), nullable=False),
        sa.Column("swept_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("orphans", sa.JSON(), nullable=False),
        sa.Column("unreachable", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "account", name="pk_kubernetes_sweeps"),
    )


def downgrade() -> None:
    op.drop_table("kubernetes_sweeps")
