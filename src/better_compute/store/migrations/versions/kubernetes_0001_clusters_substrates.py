"""kubernetes: clusters, node pools, substrates and the Nodes they list.

Revision ID: kubernetes_0001
Revises:
"""

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "kubernetes_0001"
down_revision = None
branch_labels = ("kubernetes",)
depends_on = None


def _ts(name: str, nullable: bool = False) -> "sa.Column[datetime]":
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "kubernetes_clusters",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("account", sa.String(63), nullable=False),
        sa.Column("provider", sa.String(63), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("location", sa.String(255), nullable=False),
        sa.Column("private_nodes", sa.Boolean(), nullable=False),
        sa.Column("substrate_pool_id", sa.String(64), nullable=True),
        sa.Column("provider_cluster_id", sa.String(255), nullable=True),
        sa.Column("global_id", sa.String(512), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.String(2048), nullable=True),
        sa.Column("endpoint", sa.String(512), nullable=True),
        sa.Column("version", sa.String(64), nullable=True),
        sa.Column("desired_version", sa.String(64), nullable=True),
        sa.Column("delete_requested", sa.Boolean(), nullable=False),
        _ts("next_attempt_at", nullable=True),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_kubernetes_clusters"),
    )
    op.create_index("ix_kubernetes_clusters_tenant_id", "kubernetes_clusters", ["tenant_id"])
    op.create_index("ix_kubernetes_clusters_substrate_pool_id", "kubernetes_clusters", ["substrate_pool_id"])
    op.create_table(
        "kubernetes_node_pools",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("flavor", sa.String(63), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("shape", sa.JSON(), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("min_nodes", sa.Integer(), nullable=True),
        sa.Column("max_nodes", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.String(2048), nullable=True),
        sa.Column("delete_requested", sa.Boolean(), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_kubernetes_node_pools"),
        sa.ForeignKeyConstraint(
            ["cluster_id"], ["kubernetes_clusters.id"], name="fk_kubernetes_node_pools_cluster_id_kubernetes_clusters"
        ),
        sa.UniqueConstraint("cluster_id", "name", name="uq_kubernetes_node_pools_cluster_id"),
    )
    op.create_index("ix_kubernetes_node_pools_cluster_id", "kubernetes_node_pools", ["cluster_id"])
    op.create_table(
        "kubernetes_substrates",
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(64), nullable=True),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("message", sa.String(2048), nullable=True),
        sa.Column("join_token_id", sa.String(64), nullable=True),
        sa.Column("nodes_listed", sa.Integer(), nullable=False),
        sa.Column("nodes_joined", sa.Integer(), nullable=False),
        _ts("waiting_since", nullable=True),
        _ts("last_join_at", nullable=True),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("pool_id", name="pk_kubernetes_substrates"),
    )
    op.create_index("ix_kubernetes_substrates_tenant_id", "kubernetes_substrates", ["tenant_id"])
    op.create_table(
        "kubernetes_substrate_nodes",
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        _ts("first_seen_at"),
        sa.PrimaryKeyConstraint("pool_id", "name", name="pk_kubernetes_substrate_nodes"),
    )


def downgrade() -> None:
    op.drop_table("kubernetes_substrate_nodes")
    op.drop_table("kubernetes_substrates")
    op.drop_table("kubernetes_node_pools")
    op.drop_table("kubernetes_clusters")
