"""kubernetes: adopted clusters' claims (global and in-cluster) and the teardown's next attempt.

Revision ID: kubernetes_0002
Revises: kubernetes_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0002"
down_revision = "kubernetes_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kubernetes_cluster_claims",
        sa.Column("global_id", sa.String(512), nullable=False),
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("global_id", name="pk_kubernetes_cluster_claims"),
    )
    op.create_index("ix_kubernetes_cluster_claims_pool_id", "kubernetes_cluster_claims", ["pool_id"])
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("kubernetes_substrates") as batch:
        batch.add_column(sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kubernetes_substrates") as batch:
        batch.drop_column("next_attempt_at")
    with op.batch_alter_table("kubernetes_clusters") as batch:
        batch.drop_column("claimed_at")
    op.drop_index("ix_kubernetes_cluster_claims_pool_id", "kubernetes_cluster_claims")
    op.drop_table("kubernetes_cluster_claims")
