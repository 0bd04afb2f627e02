"""vps: holds that keep a provider account while a teardown still needs it.

Revision ID: vps_0002
Revises: vps_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "vps_0002"
down_revision = "vps_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "vps_account_holds",
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("account_id", "holder", name="pk_vps_account_holds"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["vps_provider_accounts.id"], name="fk_vps_account_holds_account_id_vps_provider_accounts"
        ),
    )


def downgrade() -> None:
    op.drop_table("vps_account_holds")
