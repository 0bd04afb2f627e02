"""fleet: one row per tenant that serialises applies and counts them.

Revision ID: fleet_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "fleet_0001"
down_revision = None
branch_labels = ("fleet",)
depends_on = ("iam_0001",)


def upgrade() -> None:
    op.create_table(
        "fleet_states",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", name="pk_fleet_states"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_fleet_states_tenant_id_iam_tenants"),
    )


def downgrade() -> None:
    op.drop_table("fleet_states")
