"""compute: sites, pools, nodes, devices, reservations and quota.

`compute_devices.reservation_id` holds a device's one active reservation; booking sets
it only where it is NULL, which is what makes double booking impossible.
Names are unique per tenant among live objects (partial unique indexes), so an
archived pool's or a retired node's name can be used again.

Revision ID: compute_0001
Revises:
"""

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "compute_0001"
down_revision = None
branch_labels = ("compute",)
depends_on = ("iam_0001",)


def _ts(name: str, nullable: bool = False) -> "sa.Column[datetime]":
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "compute_sites",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("region", sa.String(64), nullable=True),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_compute_sites"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_compute_sites_tenant_id_iam_tenants"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_compute_sites_tenant_id"),
    )
    op.create_table(
        "compute_pools",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("site_id", sa.String(64), nullable=False),
        sa.Column("pool_class", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(64), nullable=True),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_compute_pools"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_compute_pools_tenant_id_iam_tenants"),
        sa.ForeignKeyConstraint(["site_id"], ["compute_sites.id"], name="fk_compute_pools_site_id_compute_sites"),
    )
    op.create_index(
        "uq_compute_pools_live_name",
        "compute_pools",
        ["tenant_id", "name"],
        unique=True,
        sqlite_where=sa.text("state != 'archived'"),
        postgresql_where=sa.text("state != 'archived'"),
    )
    op.create_index("ix_compute_pools_site_id", "compute_pools", ["site_id"])
    op.create_table(
        "compute_nodes",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("connected", sa.Boolean(), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        _ts("last_seen_at", nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("system_labels", sa.JSON(), nullable=False),
        sa.Column("inventory", sa.JSON(), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_compute_nodes"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_compute_nodes_tenant_id_iam_tenants"),
        sa.ForeignKeyConstraint(["pool_id"], ["compute_pools.id"], name="fk_compute_nodes_pool_id_compute_pools"),
    )
    op.create_index(
        "uq_compute_nodes_live_name",
        "compute_nodes",
        ["pool_id", "name"],
        unique=True,
        sqlite_where=sa.text("state != 'retired'"),
        postgresql_where=sa.text("state != 'retired'"),
    )
    op.create_index("ix_compute_nodes_pool_state", "compute_nodes", ["pool_id", "state"])
    op.create_table(
        "compute_reservations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("pool_id", sa.String(64), nullable=False),
        sa.Column("node_id", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(64), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("device_ids", sa.JSON(), nullable=False),
        sa.Column("binding", sa.String(32), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        _ts("created_at"),
        _ts("ended_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_compute_reservations"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["iam_tenants.id"], name="fk_compute_reservations_tenant_id_iam_tenants"
        ),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["compute_pools.id"], name="fk_compute_reservations_pool_id_compute_pools"
        ),
        sa.ForeignKeyConstraint(
            ["node_id"], ["compute_nodes.id"], name="fk_compute_reservations_node_id_compute_nodes"
        ),
        sa.CheckConstraint("gpu_count > 0", name="gpu_count_positive"),
    )
    op.create_index("ix_compute_reservations_node_state", "compute_reservations", ["node_id", "state"])
    op.create_index("ix_compute_reservations_tenant_state", "compute_reservations", ["tenant_id", "state"])
    op.create_index("ix_compute_reservations_pool_state", "compute_reservations", ["pool_id", "state"])
    op.create_table(
        "compute_devices",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("node_id", sa.String(64), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(128), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("reservation_id", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_compute_devices"),
        sa.ForeignKeyConstraint(["node_id"], ["compute_nodes.id"], name="fk_compute_devices_node_id_compute_nodes"),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["compute_reservations.id"],
            name="fk_compute_devices_reservation_id_compute_reservations",
        ),
        sa.UniqueConstraint("node_id", "uuid", name="uq_compute_devices_node_id"),
    )
    op.create_index("ix_compute_devices_reservation_id", "compute_devices", ["reservation_id"])
    op.create_table(
        "compute_quotas",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(64), nullable=False),
        sa.Column("gpu_limit", sa.Integer(), nullable=True),
        sa.Column("used", sa.Integer(), nullable=False),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "gpu_model", name="pk_compute_quotas"),
        sa.ForeignKeyConstraint(["tenant_id"], ["iam_tenants.id"], name="fk_compute_quotas_tenant_id_iam_tenants"),
        sa.CheckConstraint("used >= 0", name="used_not_negative"),
        sa.CheckConstraint("gpu_limit IS NULL OR gpu_limit >= 0", name="limit_not_negative"),
    )


def downgrade() -> None:
    op.drop_table("compute_quotas")
    op.drop_index("ix_compute_devices_reservation_id", table_name="compute_devices")
    op.drop_table("compute_devices")
    for index in ("ix_compute_reservations_pool_state", "ix_compute_reservations_tenant_state"):
        op.drop_index(index, table_name="compute_reservations")
    op.drop_index("ix_compute_reservations_node_state", table_name="compute_reservations")
    op.drop_table("compute_reservations")
    op.drop_index("ix_compute_nodes_pool_state", table_name="compute_nodes")
    op.drop_index("uq_compute_nodes_live_name", table_name="compute_nodes")
    op.drop_table("compute_nodes")
    op.drop_index("ix_compute_pools_site_id", table_name="compute_pools")
    op.drop_index("uq_compute_pools_live_name", table_name="compute_pools")
    op.drop_table("compute_pools")
    op.drop_table("compute_sites")
