"""kubernetes: when a substrate set out to take an adopted cluster's in-cluster claim, so a teardown
looks for the claim (and the identity made after it) even when the run died before `claimed_at`.

Revision ID: kubernetes_0004
Revises: kubernetes_0003
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0004"
down_revision = "kubernetes_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.add_column(sa.Column("claiming_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.drop_column("claiming_at")
