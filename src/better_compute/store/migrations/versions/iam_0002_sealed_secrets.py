"""iam: sealed secrets (AES-256-GCM ciphertext only; see better_compute.secrets).

Revision ID: iam_0002
Revises: iam_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "iam_0002"
down_revision = "iam_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "iam_secrets",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_iam_secrets"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_iam_secrets_tenant_id_iam_tenants"),
    )
    op.create_index("ix_iam_secrets_tenant_id", "iam_secrets", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_iam_secrets_tenant_id", table_name="iam_secrets")
    op.drop_table("iam_secrets")
