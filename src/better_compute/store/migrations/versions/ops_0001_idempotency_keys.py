"""ops: Idempotency-Key records (see better_compute.ops.idempotency).

One row per (tenant, operation, key): the primary key is what makes a key's first request
the only one on every replica. The row names the object the key stands for and a hash of
the request it was first used with.

Revision ID: ops_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "ops_0001"
down_revision = None
branch_labels = ("ops",)
depends_on = ("iam_0001",)


def upgrade() -> None:
    op.create_table(
        "ops_idempotency_keys",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("resource_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "operation", "key", name="pk_ops_idempotency_keys"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["iam_tenants.id"], name="fk_ops_idempotency_keys_tenant_id_iam_tenants"
        ),
    )


def downgrade() -> None:
    op.drop_table("ops_idempotency_keys")
