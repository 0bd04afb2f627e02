"""The kubernetes module's tables: clusters, their node pools, substrates and the Nodes they list.

Other modules' ids (tenant, pool, join token) are plain indexed strings: this module
reaches compute, vps and the gateway through their functions, never their tables.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, CheckConstraint, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.store import Base, UTCDateTime

__all__ = [
    "ClusterClaimRow",
    "ClusterRow",
    "DeploymentRow",
    "NodePoolRow",
    "SubstrateNodeRow",
    "SubstrateRow",
    "SweepRow",
]


class ClusterRow(Base):
    """A managed cluster: what better-compute wants of it and what the provider last said.

    The row is written (the intent) before the provider is asked to create anything;
    `name` is deterministic, so a retried create finds the cluster an earlier call made.
    """

    __tablename__ = "kubernetes_clusters"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    account: Mapped[str] = mapped_column(String(63))
    provider: Mapped[str] = mapped_column(String(63))
    mode: Mapped[str] = mapped_column(String(16))  # create | adopt
    name: Mapped[str] = mapped_column(String(128))
    location: Mapped[str] = mapped_column(String(255))
    private_nodes: Mapped[bool] = mapped_column(Boolean())
    substrate_pool_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    provider_cluster_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    global_id: Mapped[str | None] = mapped_column(String(512), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    endpoint: Mapped[str | None] = mapped_column(String(512), nullable=True)
    version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    upgrade: Mapped[dict[str, Any] | None] = mapped_column(JSON(), nullable=True)
    """An upgrade under way (see clusters/upgrades.py): its versions and how far the drain has come."""
    delete_requested: Mapped[bool] = mapped_column(Boolean())
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    claiming_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """When the substrate set out to take an adopted cluster's in-cluster claim: recorded before the
    claim is taken, so teardown looks for the claim and the identity even when `claimed_at` never was."""
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """When the substrate took the in-cluster claim of an adopted cluster; None until then, and
    again once teardown gave it back. Node pools are made only on a claimed adopted cluster."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ClusterClaimRow(Base):
    """One cluster backs one pool: a cluster's provider-global id, claimed by the first pool
    that reached it (whichever account it came through). The primary key makes a second
    claim fail in the store itself, on SQLite as on PostgreSQL."""

    __tablename__ = "kubernetes_cluster_claims"

    global_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    pool_id: Mapped[str] = mapped_column(String(64), index=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime())


class NodePoolRow(Base):
    """One node pool of a cluster: a flavor's shape (never changed in place) and its size."""

    __tablename__ = "kubernetes_node_pools"
    __table_args__ = (UniqueConstraint("cluster_id", "name"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey("kubernetes_clusters.id"), index=True)
    flavor: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(128))
    shape: Mapped[dict[str, Any]] = mapped_column(JSON())
    node_count: Mapped[int] = mapped_column(Integer())
    min_nodes: Mapped[int | None] = mapped_column(Integer(), nullable=True)
    max_nodes: Mapped[int | None] = mapped_column(Integer(), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    delete_requested: Mapped[bool] = mapped_column(Boolean())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SubstrateRow(Base):
    """A pool's substrate: its state and message, its cluster, and its join bookkeeping."""

    __tablename__ = "kubernetes_substrates"

    pool_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    cluster_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    mode: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    join_token_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    nodes_listed: Mapped[int] = mapped_column(Integer())
    nodes_joined: Mapped[int] = mapped_column(Integer())
    waiting_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_join_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """When a teardown that must retry (2 minutes, or the delete backoff) tries next."""
    conditions: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(), nullable=True)
    """Each step's condition as the last run left it: name, status, message, since (substrates/steps.py)."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SubstrateNodeRow(Base):
    """A Kubernetes Node the substrate listed last, with the flavor (and spot-ness) its labels name."""

    __tablename__ = "kubernetes_substrate_nodes"

    pool_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    spot: Mapped[bool] = mapped_column(Boolean())
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())
    uid: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """The Node's uid: a Node re-created under the name is another Node, first seen anew."""
    node_pool: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """The node pool its provider label names (a flavor's node pool), as last listed."""
    zone: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """Its `topology.kubernetes.io/zone` (None where the provider has no zones: DOKS)."""


class SweepRow(Base):
    """The last orphan sweep of one provider account (kubernetes/sweep/): what it found, which doctor
    reports (`kubernetes.orphans-found`) until a sweep finds nothing there."""

    __tablename__ = "kubernetes_sweeps"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    account: Mapped[str] = mapped_column(String(63), primary_key=True)
    swept_at: Mapped[datetime] = mapped_column(UTCDateTime())
    orphans: Mapped[list[dict[str, Any]]] = mapped_column(JSON())
    unreachable: Mapped[list[dict[str, Any]]] = mapped_column(JSON())


class DeploymentRow(Base):
    """This deployment's mark (kubernetes/deployment.py): one row, made by the first replica that needs it.

    It lives in the database, so every replica on it reads the same id and a restored backup keeps it:
    the orphan sweep tells what this deployment made from what another one (on another database) made."""

    __tablename__ = "kubernetes_deployment"
    __table_args__ = (CheckConstraint("singleton = 1", name="singleton"),)

    singleton: Mapped[int] = mapped_column(Integer(), primary_key=True)
    """Always 1: the primary key makes a second row fail in the store itself."""
    id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
