"""compute: the devices-by-reservation index covers held devices only.

Release finds a reservation's devices by `reservation_id = :id`, which the partial
index still serves. A full index on `reservation_id` also served `reservation_id IS
NULL`, and before PostgreSQL had statistics for a fresh table the planner counted each
node's free GPUs through it: every free device of the table for every node (5 ms a
booking at 63 nodes). Without it the count can only use ix_compute_devices_free or the
node's own devices.

Revision ID: compute_0003
Revises: compute_0002
"""

import sqlalchemy as sa
from alembic import op

revision = "compute_0003"
down_revision = "compute_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_compute_devices_reservation_id", table_name="compute_devices")
    op.create_index(
        "ix_compute_devices_held",
        "compute_devices",
        ["reservation_id"],
        sqlite_where=sa.text("reservation_id IS NOT NULL"),
        postgresql_where=sa.text("reservation_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_compute_devices_held", table_name="compute_devices")
    op.create_index("ix_compute_devices_reservation_id", "compute_devices", ["reservation_id"])
