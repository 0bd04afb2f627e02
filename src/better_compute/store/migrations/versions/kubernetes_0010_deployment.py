"""kubernetes: this deployment's mark, one row, which the orphan sweep tells its own things by.

Revision ID: kubernetes_0010
Revises: kubernetes_0009
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0010"
down_revision = "kubernetes_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kubernetes_deployment",
        sa.Column("singleton", sa.Integer(), nullable=False),
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("singleton", name="pk_kubernetes_deployment"),
        sa.CheckConstraint("singleton = 1", name="ck_kubernetes_deployment_singleton"),
    )


def downgrade() -> None:
    op.drop_table("kubernetes_deployment")
