"""engine: the work-items table (leased claims, token-guarded completion, backoff).

Revision ID: engine_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "engine_0001"
down_revision = None
branch_labels = ("engine",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "work_items",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lock_token", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_work_items"),
        sa.UniqueConstraint("kind", "key", name="uq_work_items_kind_key"),
    )
    op.create_index("ix_work_items_due_at", "work_items", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_work_items_due_at", table_name="work_items")
    op.drop_table("work_items")
