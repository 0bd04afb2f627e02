"""compute: the machine a node is bound to (a Kubernetes Node's uid), so another machine under its name is a new node.

Revision ID: compute_0005
Revises: compute_0004
"""

import sqlalchemy as sa
from alembic import op

revision = "compute_0005"
down_revision = "compute_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.add_column(sa.Column("machine_id", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.drop_column("machine_id")
