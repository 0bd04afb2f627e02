"""kubernetes: a cluster's upgrade in progress (from, to, and the drain's place), so a restarted run resumes it.

Revision ID: kubernetes_0003
Revises: kubernetes_0002
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0003"
down_revision = "kubernetes_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.add_column(sa.Column("upgrade", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.drop_column("upgrade")
