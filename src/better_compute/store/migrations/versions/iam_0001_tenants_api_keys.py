"""iam: tenants and API keys (stored as SHA-256 hashes only).

Revision ID: iam_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "iam_0001"
down_revision = None
branch_labels = ("iam",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "iam_tenants",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_iam_tenants"),
        sa.UniqueConstraint("name", name="uq_iam_tenants_name"),
    )
    op.create_table(
        "iam_api_keys",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_iam_api_keys"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_iam_api_keys_tenant_id_iam_tenants"),
    )
    op.create_index("ix_iam_api_keys_tenant_id", "iam_api_keys", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_iam_api_keys_tenant_id", table_name="iam_api_keys")
    op.drop_table("iam_api_keys")
    op.drop_table("iam_tenants")
