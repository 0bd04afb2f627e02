"""kubernetes: drop kubernetes_clusters.desired_version, written by an upgrade and never read.

The upgrade under way (`upgrade`, its JSON progress) holds the version it goes to.

Revision ID: kubernetes_0006
Revises: kubernetes_0005
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0006"
down_revision = "kubernetes_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.drop_column("desired_version")


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.add_column(sa.Column("desired_version", sa.String(64), nullable=True))
