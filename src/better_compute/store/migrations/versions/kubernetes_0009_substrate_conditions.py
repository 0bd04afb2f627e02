"""kubernetes: each substrate step's condition (name, status, message, since), which the state read shows.

Revision ID: kubernetes_0009
Revises: kubernetes_0008
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0009"
down_revision = "kubernetes_0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kubernetes_substrates") as batch:
        batch.add_column(sa.Column("conditions", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_substrates") as batch:
        batch.drop_column("conditions")
