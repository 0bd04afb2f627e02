"""Compute core: sites, pools, nodes, devices, reservations and quota.

Each service class is built with `(db, clock)` and runs one transaction per call, for
tenants and the public API. Each module also exposes session-level functions (taking
the caller's `session` and `now`) so that another module can write in ONE transaction
with its own writes: fleet apply makes sites and pools, the gateway registers nodes,
the kubernetes substrate retires them. `compute_services(db, clock)` builds the five
services sharing one change feed, which is what `Compute` attaches.
"""

from __future__ import annotations

from dataclasses import dataclass

from better_compute.core.clock import Clock
from better_compute.store import Database

from .changes import ChangeFeed, mark_changed
from .models import (
    SPOT_LABEL,
    Assignment,
    Device,
    Held,
    Node,
    NodeState,
    Pool,
    PoolState,
    QuotaUsage,
    Reservation,
    ReservationState,
    Site,
    gpu_fault,
)
from .nodes import (
    Nodes,
    cordon,
    get_node,
    list_nodes,
    mark_ready,
    record_heartbeat,
    register_node,
    retire,
    set_connected,
    set_system_label,
    uncordon,
    update_inventory,
)
from .pools import Pools, archive_pool, create_pool, finish_archive, get_pool, get_pool_by_name, list_pools, update_pool
from .quotas import Quotas, quota_key, set_quota, usage
from .reservations import (
    Reservations,
    active_count,
    active_on_pools,
    assignment_for,
    end_reservation,
    end_reservations_on_node,
)
from .sites import Sites, create_site, delete_site, get_site, list_sites, update_site

__all__ = [
    "SPOT_LABEL",
    "Assignment",
    "ChangeFeed",
    "ComputeServices",
    "Device",
    "Held",
    "Node",
    "NodeState",
    "Nodes",
    "Pool",
    "PoolState",
    "Pools",
    "QuotaUsage",
    "Quotas",
    "Reservation",
    "ReservationState",
    "Reservations",
    "Site",
    "Sites",
    "active_count",
    "active_on_pools",
    "archive_pool",
    "assignment_for",
    "compute_services",
    "cordon",
    "create_pool",
    "create_site",
    "delete_site",
    "end_reservation",
    "end_reservations_on_node",
    "finish_archive",
    "get_node",
    "get_pool",
    "get_pool_by_name",
    "get_site",
    "gpu_fault",
    "list_nodes",
    "list_pools",
    "list_sites",
    "mark_changed",
    "mark_ready",
    "quota_key",
    "record_heartbeat",
    "register_node",
    "retire",
    "set_connected",
    "set_quota",
    "set_system_label",
    "uncordon",
    "update_inventory",
    "update_pool",
    "update_site",
    "usage",
]


@dataclass(frozen=True, slots=True)
class ComputeServices:
    sites: Sites
    pools: Pools
    nodes: Nodes
    reservations: Reservations
    quotas: Quotas
    feed: ChangeFeed


def compute_services(db: Database, clock: Clock) -> ComputeServices:
    """The compute services over one database, sharing one change feed (so every write reaches the hook)."""
    feed = ChangeFeed(db)
    return ComputeServices(
        sites=Sites(db, clock),
        pools=Pools(db, clock, feed),
        nodes=Nodes(db, clock, feed),
        reservations=Reservations(db, clock, feed),
        quotas=Quotas(db, clock),
        feed=feed,
    )
