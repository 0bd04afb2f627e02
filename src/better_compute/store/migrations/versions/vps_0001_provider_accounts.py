"""vps: provider accounts (a tenant's named account at GKE, EKS, DOKS, ...).

Revision ID: vps_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "vps_0001"
down_revision = None
branch_labels = ("vps",)
depends_on = ("iam_0001",)


def upgrade() -> None:
    op.create_table(
        "vps_provider_accounts",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("provider", sa.String(63), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_vps_provider_accounts"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["iam_tenants.id"], name="fk_vps_provider_accounts_tenant_id_iam_tenants"
        ),
        sa.UniqueConstraint("tenant_id", "name", name="uq_vps_provider_accounts_tenant_id"),
    )


def downgrade() -> None:
    op.drop_table("vps_provider_accounts")
