"""kubernetes: a listed Node's uid, so a Node re-created under its name is first seen anew.

Revision ID: kubernetes_0005
Revises: kubernetes_0004
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0005"
down_revision = "kubernetes_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_substrate_nodes") as batch:
        batch.add_column(sa.Column("uid", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_substrate_nodes") as batch:
        batch.drop_column("uid")
