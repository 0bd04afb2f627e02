"""kubernetes: a listed Node's node pool and zone, so the fleet plan tells which flavor and zone each Node is in.

Revision ID: kubernetes_0007
Revises: kubernetes_0006
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0007"
down_revision = "kubernetes_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_substrate_nodes") as batch:
        batch.add_column(sa.Column("node_pool", sa.String(128), nullable=True))
        batch.add_column(sa.Column("zone", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_substrate_nodes") as batch:
        batch.drop_column("zone")
        batch.drop_column("node_pool")
