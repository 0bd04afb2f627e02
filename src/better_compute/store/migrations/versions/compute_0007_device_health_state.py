"""compute: each device's health state (healthy, unhealthy, rechecking, reset-needed), since when, and until
when a rechecking GPU is out; a GPU unhealthy before this reads `unhealthy`, since unknown (NULL).

Revision ID: compute_0007
Revises: compute_0006
"""

import sqlalchemy as sa
from alembic import op

revision = "compute_0007"
down_revision = "compute_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_devices") as batch:
        batch.add_column(sa.Column("health_state", sa.String(16), nullable=False, server_default="healthy"))
        batch.add_column(sa.Column("health_since", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("health_until", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE compute_devices SET health_state = 'unhealthy' WHERE health_reason IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("compute_devices") as batch:
        batch.drop_column("health_until")
        batch.drop_column("health_since")
        batch.drop_column("health_state")
