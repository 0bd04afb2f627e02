"""kubernetes: a cluster's upgrade in progress (from, to, and the drain's place), so a restarted run resumes it.

Revision ID: kubernetes_upgrade
Revises: kubernetes_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_upgrade"
down_revision = "kubernetes_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.add_column(sa.Column("upgrade", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.drop_column("upgrade")
