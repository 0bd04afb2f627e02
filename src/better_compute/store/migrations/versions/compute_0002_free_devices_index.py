"""compute: an index of free devices by node, which booking reads on every request.

Booking looks up a node's free GPUs (`reservation_id IS NULL AND present`) in index
order; without this index, and before PostgreSQL has statistics for a fresh table,
the planner joins nodes to every free device of the table (quadratic).

Revision ID: compute_0002
Revises: compute_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "compute_0002"
down_revision = "compute_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_compute_devices_free",
        "compute_devices",
        ["node_id", "idx"],
        sqlite_where=sa.text("reservation_id IS NULL AND present"),
        postgresql_where=sa.text("reservation_id IS NULL AND present"),
    )


def downgrade() -> None:
    op.drop_index("ix_compute_devices_free", table_name="compute_devices")
