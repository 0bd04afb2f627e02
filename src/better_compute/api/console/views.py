"""What each console page shows, read through the same ops functions every /v1 route answers with.

No page reads the store itself: a pool's row is ops.pools', its Nodes ops.nodes', its bookings
ops.reservations', its substrate and cluster ops.clusters' and the findings the doctor route's, so
the console can never show what the API would not (another tenant's pools least of all).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from better_compute.api.console.timeline import Timeline, timeline
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.decisions import Kind
from better_compute.decisions.reading import MAX_LIMIT
from better_compute.kubernetes.substrates.substrate_rows import JOIN_WARNING
from better_compute.ops import clusters, events, nodes, pools, reservations
from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = [
    "DECISION_FILTERS",
    "decisions_page",
    "doctor_page",
    "fleet_page",
    "join_warning",
    "pool_page",
    "reservations_page",
]

DECISION_FILTERS = ("pool", "node", "reservation", "kind", "since", "cursor")
"""The decision log page's query parameters: GET /v1/events' own, by the same names."""


async def _substrate(compute: Compute, tenant_id: str, pool_id: str) -> View | None:
    """The pool's substrate view, or None where there is none (no kubernetes module, or a pool of another kind)."""
    if "kubernetes" not in compute.modules:
        return None
    try:
        return await clusters.get_substrate(compute, tenant_id, pool_id)
    except ComputeError as err:
        if err.code is ErrorCode.NOT_FOUND:
            return None
        raise


def join_warning(substrate: View | None, now: datetime) -> bool:
    """Whether Nodes have waited JOIN_WARNING (15 minutes) or more to join: the substrate's own warning."""
    waiting = (substrate or {}).get("waitingToJoin") or {}
    since = waiting.get("since")
    return bool(waiting.get("count")) and since is not None and now - datetime.fromisoformat(since) >= JOIN_WARNING


def _gpus(pool_nodes: list[View], active: list[View]) -> dict[str, int]:
    total = sum(n["gpus"] for n in pool_nodes if n["state"] != "retired")
    booked = sum(r["gpuCount"] for r in active)
    degraded = sum(len(r["degradedGpus"]) for r in active)  # known for booked GPUs: bcd reports them per booking
    return {"total": total, "booked": booked, "free": max(total - booked, 0), "degraded": degraded}


def _provider(substrate: View | None) -> str | None:
    cluster = substrate["cluster"] if substrate is not None else None
    return str(cluster["provider"]) if cluster is not None else None


async def fleet_page(compute: Compute, tenant_id: str) -> dict[str, Any]:
    """Every pool of the tenant: provider, substrate state and message, Nodes listed and joined, GPUs."""
    all_nodes = await nodes.list_nodes(compute, tenant_id)
    active = await reservations.list_reservations(compute, tenant_id, state="active")
    rows = []
    for pool in await pools.list_pools(compute, tenant_id):
        substrate = await _substrate(compute, tenant_id, pool["id"])
        mine = [n for n in all_nodes if n["poolId"] == pool["id"]]
        rows.append(
            {
                "pool": pool,
                "substrate": substrate,
                "provider": _provider(substrate),
                "join_warning": join_warning(substrate, compute.clock.now()),
                "gpus": _gpus(mine, [r for r in active if r["poolId"] == pool["id"]]),
            }
        )
    return {"rows": rows}


def _grid(pool_nodes: list[View], active: list[View]) -> list[dict[str, Any]]:
    """One row a Node, one cell a GPU: booked cells first (degraded ones, then Spot or not), then free ones."""
    by_node: dict[str, list[View]] = defaultdict(list)
    for reservation in active:
        if reservation["nodeId"] is not None:
            by_node[reservation["nodeId"]].append(reservation)
    grid = []
    for node in pool_nodes:
        cells: list[dict[str, Any]] = []
        for reservation in by_node[node["id"]]:
            kind = "spot" if reservation["spot"] else "booked"
            degraded = len(reservation["degradedGpus"])
            cells += [{"kind": "degraded", "reservation": reservation["id"]}] * degraded
            cells += [{"kind": kind, "reservation": reservation["id"]}] * (reservation["gpuCount"] - degraded)
        cells += [{"kind": "free", "reservation": None}] * max(node["gpus"] - len(cells), 0)
        grid.append({"node": node, "cells": cells})
    return grid


async def pool_page(compute: Compute, tenant_id: str, name: str) -> dict[str, Any]:
    """One pool: its substrate, cluster and node pools at the provider, its Nodes and its GPU grid."""
    pool = await pools.get_pool(compute, tenant_id, name)
    pool_nodes = await nodes.list_nodes(compute, tenant_id, pool=name)
    active = await reservations.list_reservations(compute, tenant_id, pool=name, state="active")
    substrate = await _substrate(compute, tenant_id, pool["id"])
    cluster = None
    if substrate is not None and substrate["cluster"] is not None:
        try:
            cluster = await clusters.get_cluster(compute, tenant_id, substrate["cluster"]["id"])
        except ComputeError as err:
            if err.code is not ErrorCode.NOT_FOUND:
                raise
    return {
        "pool": pool,
        "substrate": substrate,
        "cluster": cluster,
        "join_warning": join_warning(substrate, compute.clock.now()),
        "nodes": pool_nodes,
        "grid": _grid(pool_nodes, active),
        "gpus": _gpus(pool_nodes, active),
        "timeline": await _lifecycle(compute, tenant_id, name) if substrate is not None else None,
    }


async def _lifecycle(compute: Compute, tenant_id: str, pool_name: str) -> Timeline:
    """The substrate's recorded state changes (the decision log, every page of them), as a timeline to now."""
    found: list[View] = []
    cursor: str | None = None
    while True:
        page = await events.list_events(
            compute, tenant_id, pool=pool_name, kind=Kind.SUBSTRATE_STATE, limit=MAX_LIMIT, cursor=cursor
        )
        found += page["events"]
        cursor = page["next"]
        if cursor is None:
            return timeline(found, compute.clock.now())


async def reservations_page(compute: Compute, tenant_id: str) -> dict[str, Any]:
    """Who holds which GPUs where, Spot or not, and in what state (newest first)."""
    found = await reservations.list_reservations(compute, tenant_id)
    names = {n["id"]: n["name"] for n in await nodes.list_nodes(compute, tenant_id, include_retired=True)}
    return {"reservations": found[::-1], "node_names": names}


async def doctor_page(compute: Compute, tenant_id: str) -> dict[str, Any]:
    """The doctor's findings as GET /v1/doctor answers them for this tenant."""
    findings = await compute.doctor(tenant_id=tenant_id)
    return {"findings": [f.to_dict() for f in findings]}


async def decisions_page(compute: Compute, tenant_id: str, query: dict[str, str]) -> dict[str, Any]:
    """One page of the tenant's decision log, as GET /v1/events answers it for the same filters and cursor.

    Bad input (an unknown kind, a since that is no time, a foreign cursor) is answered as `error`, the
    refusal naming its parameter, beside the filters it came with and no events."""
    given = {name: query[name] for name in DECISION_FILTERS if query.get(name)}
    filters = {k: v for k, v in given.items() if k != "cursor"}
    form = {"filters": filters, "kinds": [k.value for k in Kind]}
    form["pool_names"] = [p["name"] for p in await pools.list_pools(compute, tenant_id)]
    try:
        page = await events.list_events(
            compute,
            tenant_id,
            pool=given.get("pool"),
            node=given.get("node"),
            reservation=given.get("reservation"),
            kind=given.get("kind"),
            since=given.get("since"),
            cursor=given.get("cursor"),
        )
    except ComputeError as err:
        if err.code is not ErrorCode.INVALID_INPUT:
            raise
        return {**form, "error": err, "events": [], "next_query": None}
    after = {**filters, "cursor": page["next"]} if page["next"] is not None else None
    return {**form, "error": None, "events": page["events"], "next_query": after}
