"""compute: each device's health as bcd reports it (the reason and XID of an unhealthy GPU; NULL: healthy).

Revision ID: compute_0006
Revises: compute_0005
"""

import sqlalchemy as sa
from alembic import op

revision = "compute_0006"
down_revision = "compute_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_devices") as batch:
        batch.add_column(sa.Column("health_reason", sa.String(64), nullable=True))
        batch.add_column(sa.Column("health_xid", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compute_devices") as batch:
        batch.drop_column("health_xid")
        batch.drop_column("health_reason")
