"""Nodes and their GPUs: the state machine, connection, labels and inventory.

    joining ──► ready ◄──► cordoned
       │          │           │
       └──────────┴───────────┴──► retired   (terminal; only with no active reservation)

Only `ready` nodes take new bookings. `joining → cordoned` is allowed so that a teardown
can cordon every node it finds. Asking for the state a node is already in is a no-op, so
a reconciler may repeat itself; every other move is INVALID_STATE. User labels live
apart from system labels: keys under `bc.dev/` and `better-compute.dev/` (such as
`bc.dev/capacity=spot`) are written only by `set_system_label`, a session-level
function for system code that is not exposed to tenants.

Each cordon, uncordon and retirement is a decision in the log, recorded in its transaction by
the move that made it (a repeated ask records nothing) with the caller's reason; so is a GPU
bcd newly reports unhealthy (`gpu.degraded`, naming the reservation that holds it, if any).
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.decisions import Decision, Kind, acting, record
from better_compute.store import Database

from .changes import ChangeFeed, mark_changed
from .health import Quarantined, count_change, quarantined_gpus
from .inventory import Unhealthy, check_inventory, competing_plugins, unhealthy_gpus
from .models import SPOT_LABEL, Device, GpuState, Node, NodeState, gpu_fault
from .pools import pool_row
from .tables import DeviceRow, NodeRow, PoolRow, ReservationRow
from .validation import SYSTEM_PREFIXES, check_labels, check_text, invalid

__all__ = [
    "TRANSITIONS",
    "Nodes",
    "cordon",
    "find_live_node",
    "get_node",
    "list_nodes",
    "lock_node_and_pool",
    "mark_ready",
    "record_heartbeat",
    "register_node",
    "retire",
    "retired_among",
    "set_connected",
    "set_system_label",
    "uncordon",
    "update_inventory",
]

TRANSITIONS: dict[str, frozenset[str]] = {
    "joining": frozenset({"ready", "cordoned", "retired"}),
    "ready": frozenset({"cordoned", "retired"}),
    "cordoned": frozenset({"ready", "retired"}),
    "retired": frozenset(),
}


def device_of(row: DeviceRow) -> Device:
    return Device(
        id=row.id,
        node_id=row.node_id,
        index=row.index,
        uuid=row.uuid,
        model=row.model,
        present=row.present,
        reservation_id=row.reservation_id,
        health_reason=row.health_reason,
        health_xid=row.health_xid,
        health_state=cast(GpuState, row.health_state),
        health_since=row.health_since,
        health_until=row.health_until,
    )


async def _devices(session: AsyncSession, node_id: str) -> list[DeviceRow]:
    rows = await session.scalars(select(DeviceRow).where(DeviceRow.node_id == node_id).order_by(DeviceRow.index))
    return list(rows)


async def node_of(session: AsyncSession, row: NodeRow) -> Node:
    return _node(row, await _devices(session, row.id))


def _node(row: NodeRow, devices: list[DeviceRow]) -> Node:
    return Node(
        id=row.id,
        pool_id=row.pool_id,
        tenant_id=row.tenant_id,
        name=row.name,
        state=cast(NodeState, row.state),
        connected=row.connected,
        last_seen_at=row.last_seen_at,
        labels=dict(row.labels),
        system_labels=dict(row.system_labels),
        inventory=dict(row.inventory),
        devices=tuple(device_of(d) for d in devices),
        created_at=row.created_at,
        machine_id=row.machine_id,
    )


async def node_row(session: AsyncSession, node_id: str, *, tenant_id: str | None = None, lock: bool = False) -> NodeRow:
    """The node's row. Unlocked, from the session's identity map when this transaction has it (a
    query would return that same object, unrefreshed, after a round trip); locked, as locked."""
    valid = isinstance(node_id, str)  # an id from user input may be anything
    if lock:  # the row as locked, not an older copy this session loaded before
        query = select(NodeRow).where(NodeRow.id == node_id).with_for_update()
        row = (await session.scalars(query.execution_options(populate_existing=True))).one_or_none() if valid else None
    else:
        row = await session.get(NodeRow, node_id) if valid else None
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node_id!r}", "/nodeId")
    return row


async def lock_node_and_pool(session: AsyncSession, node_id: str) -> tuple[NodeRow, PoolRow]:
    """Lock the node's pool, then the node, `FOR UPDATE`: the order bookings take them in (see booking)."""
    pool_id = (
        await session.scalar(select(NodeRow.pool_id).where(NodeRow.id == node_id)) if isinstance(node_id, str) else None
    )
    if pool_id is None:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node_id!r}", "/nodeId")
    pool = await pool_row(session, pool_id=pool_id, lock=True)
    return await node_row(session, node_id, lock=True), pool


async def _sync_devices(
    session: AsyncSession,
    node_id: str,
    gpus: list[tuple[int, str, str]],
    *,
    now: datetime,
    held_out: bool = False,
    unhealthy: dict[str, Unhealthy] | None = None,
) -> tuple[list[DeviceRow], list[DeviceRow]]:
    """Make the node's devices match the reported GPUs; a GPU that went missing stays, marked not present.
    `held_out` (another device plugin competes with bcd on the node) marks every GPU not present, so none
    is booked until bcd reports the node clear again; reservations already made keep their devices.
    An `unhealthy` GPU (bcd's health watch) keeps its reason and XID and is not present either: it takes
    no new booking at once, and the reservation holding it reads degraded (reservations.degraded_gpus).
    A GPU whose state, reason or XID changes is stamped `health_since` now, and counted (compute.health).

    Returns the node's devices as they now are, in index order, so the caller need not read them again,
    and those it found newly unhealthy (for the decision log: `_record_degraded`).
    """
    existing = {d.uuid: d for d in await _devices(session, node_id)}
    devices = list(existing.values())
    reported = set()
    sick = unhealthy or {}
    newly_sick = []
    for index, uuid, model in gpus:
        reported.add(uuid)
        reason, xid, state, until = sick.get(uuid, (None, None, "healthy", None))
        row = existing.get(uuid)
        before = None if row is None else (row.health_state, row.health_reason, row.health_xid)
        if row is None:
            row = DeviceRow(id=new_id("dev"), node_id=node_id, index=index, uuid=uuid, model=model)
            session.add(row)
            devices.append(row)
        row.index, row.model, row.present = index, model, not held_out and reason is None
        if reason is not None and (before is None or before[1:] != (reason, xid)):
            newly_sick.append(row)
        if before != (state, reason, xid):
            count_change(None if before is None else before[0], state, reason)
            row.health_state, row.health_reason, row.health_xid, row.health_since = state, reason, xid, now
        row.health_until = until
    for uuid, row in existing.items():
        if uuid not in reported:
            row.present = False
    return sorted(devices, key=lambda d: d.index), newly_sick


async def _record_degraded(session: AsyncSession, node: NodeRow, sick: list[DeviceRow], now: datetime) -> None:
    """bcd reported these GPUs unhealthy: one decision each, naming the reservation it leaves degraded."""
    for device in sick:
        held = "" if device.reservation_id is None else f"; reservation {device.reservation_id} now reads degraded"
        why = f"bcd reported GPU {device.uuid} (index {device.index}) unhealthy: {gpu_fault(device.health_reason, device.health_xid)}{held}"
        await record(
            session, now, Decision(
                Kind.GPU_DEGRADED, node.tenant_id, why, pool_id=node.pool_id, node_id=node.id, node_name=node.name,
                reservation_id=device.reservation_id, gpu_ids=(device.uuid,),
                details={"reason": device.health_reason, "xid": device.health_xid, "index": device.index},
            ),
        )  # fmt: skip


async def register_node(
    session: AsyncSession,
    *,
    now: datetime,
    pool_id: str,
    name: str,
    inventory: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    system_labels: dict[str, str] | None = None,
    machine_id: str | None = None,
) -> Node:
    """The pool's live node with this name, made (`joining`) if there is none; the inventory, if given, is recorded.

    `machine_id` binds the node to the machine a join proved (a node made before any was proven
    takes its first one); the caller retires a live node of another machine first.

    `system_labels` (system code only) are given to a node as it is made (and merged into
    an existing one's), so that a node known to be spot (`bc.dev/capacity=spot`) is never,
    even briefly, bookable as on-demand.
    """
    check_text(name, "/name", max_length=253)
    checked = check_inventory({} if inventory is None else inventory)
    user_labels = check_labels({} if labels is None else labels, "/labels")
    born_with = check_labels({} if system_labels is None else system_labels, "/systemLabels", system=True)
    if any(not key.startswith(SYSTEM_PREFIXES) for key in born_with):
        raise invalid("/systemLabels", f"a system label lives under {' or '.join(SYSTEM_PREFIXES)}")
    pool = await pool_row(session, pool_id=pool_id)
    if pool.state != "active":
        raise ComputeError(ErrorCode.INVALID_STATE, f"pool {pool.name!r} is {pool.state}: no node joins it", "/poolId")
    row = await session.scalar(
        select(NodeRow).where(NodeRow.pool_id == pool_id, NodeRow.name == name, NodeRow.state != "retired")
    )
    if row is None:
        row = NodeRow(
            id=new_id("node"),
            tenant_id=pool.tenant_id,
            pool_id=pool_id,
            name=name,
            state="joining",
            connected=False,
            spot=born_with.get(SPOT_LABEL) == "spot",
            last_seen_at=None,
            labels=user_labels,
            system_labels=born_with,
            inventory={},
            created_at=now,
            updated_at=now,
            machine_id=machine_id,
        )
        session.add(row)
        await session.flush()
    if row.machine_id is None and machine_id is not None:
        row.machine_id = machine_id
    if born_with and {**row.system_labels, **born_with} != row.system_labels:
        row.system_labels = {**row.system_labels, **born_with}
        row.spot = row.system_labels.get(SPOT_LABEL) == "spot"
        mark_changed(session, [row.id])
    if inventory is None:
        await session.flush()
        return await node_of(session, row)
    row.inventory = checked[0]
    row.updated_at = now
    devices, sick = await _sync_devices(
        session,
        row.id,
        checked[1],
        now=now,
        held_out=bool(competing_plugins(checked[0])),
        unhealthy=unhealthy_gpus(checked[0]),
    )
    await session.flush()
    await _record_degraded(session, row, sick, now)
    return _node(row, devices)


async def update_inventory(session: AsyncSession, node_id: str, inventory: dict[str, Any], now: datetime) -> Node:
    stored, gpus = check_inventory(inventory)
    row = await node_row(session, node_id, lock=True)
    if row.state == "retired":
        raise ComputeError(ErrorCode.INVALID_STATE, f"node {row.name!r} is retired", "/nodeId")
    row.inventory, row.updated_at = stored, now
    devices, sick = await _sync_devices(
        session, node_id, gpus, now=now, held_out=bool(competing_plugins(stored)), unhealthy=unhealthy_gpus(stored)
    )
    await session.flush()
    mark_changed(session, [node_id])
    await _record_degraded(session, row, sick, now)
    return _node(row, devices)


async def set_connected(session: AsyncSession, node_id: str, connected: bool, now: datetime) -> None:
    """bcd connected or went away; either way it was last seen now. A retired node is never connected again."""
    row = await node_row(session, node_id)
    row.connected, row.last_seen_at = bool(connected) and row.state != "retired", now
    await session.flush()


async def record_heartbeat(session: AsyncSession, node_id: str, now: datetime) -> None:
    await set_connected(session, node_id, True, now)


async def retired_among(session: AsyncSession, node_ids: Collection[str]) -> set[str]:
    """Which of these nodes are retired (or gone): their sessions have no right to exist."""
    if not node_ids:
        return set()
    live = await session.scalars(select(NodeRow.id).where(NodeRow.id.in_(node_ids), NodeRow.state != "retired"))
    return set(node_ids) - set(live)


async def set_system_label(
    session: AsyncSession, node_id: str, key: str, value: str | None, now: datetime | None = None
) -> Node:
    """System code only: set (or, with None, remove) a label such as `bc.dev/capacity=spot`."""
    if not isinstance(key, str) or not key.startswith(SYSTEM_PREFIXES):
        raise invalid("/key", f"a system label lives under {' or '.join(SYSTEM_PREFIXES)}")
    if value is not None:
        check_labels({key: value}, "/systemLabels", system=True)
    row = await node_row(session, node_id, lock=True)
    labels = dict(row.system_labels)
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    if labels != row.system_labels:
        row.system_labels = labels
        row.spot = labels.get(SPOT_LABEL) == "spot"
        if now is not None:
            row.updated_at = now
        await session.flush()
        mark_changed(session, [node_id])
    return await node_of(session, row)


def _move(row: NodeRow, to: str, now: datetime) -> bool:
    """Apply one transition to a locked row; False when it is already there, INVALID_STATE when not allowed."""
    if row.state == to:
        return False
    if to not in TRANSITIONS[row.state]:
        raise ComputeError(
            ErrorCode.INVALID_STATE, f"node {row.name!r} is {row.state}; it cannot become {to}", "/nodeId"
        )
    row.state, row.updated_at = to, now
    return True


async def _transition(
    session: AsyncSession,
    node_id: str,
    to: str,
    now: datetime,
    *,
    tenant_id: str | None = None,
    keep: tuple[str, ...] = (),
    decided: tuple[Kind, str, str | None] | None = None,
) -> Node:
    """Move the node to `to` unless it is in one of the `keep` states; the change reaches the hook, and
    the decision log gets `decided` (kind, reason, principal) when the node moved."""
    row = await node_row(session, node_id, tenant_id=tenant_id, lock=True)
    if row.state not in keep and _move(row, to, now):
        await session.flush()
        mark_changed(session, [node_id])
        if decided is not None:
            await _record_node(session, row, now, *decided)
    return await node_of(session, row)


async def _record_node(
    session: AsyncSession, row: NodeRow, now: datetime, kind: Kind, reason: str, principal: str | None = None
) -> None:
    await record(
        session, now, Decision(
            kind, row.tenant_id, reason, pool_id=row.pool_id, node_id=row.id, node_name=row.name, principal=principal,
        ),
    )  # fmt: skip


async def mark_ready(session: AsyncSession, node_id: str, now: datetime) -> Node:
    """A joined node whose bcd is connected becomes ready; a cordoned node stays cordoned."""
    return await _transition(session, node_id, "ready", now, keep=("cordoned",))


async def cordon(
    session: AsyncSession,
    node_id: str,
    now: datetime,
    *,
    tenant_id: str | None = None,
    reason: str,
    principal: str | None = None,
) -> Node:
    """No new bookings on the node; what it holds stays. `reason` (and who asked) go to the decision log."""
    decided = (Kind.CORDONED, reason, principal)
    return await _transition(session, node_id, "cordoned", now, tenant_id=tenant_id, decided=decided)


async def uncordon(
    session: AsyncSession,
    node_id: str,
    now: datetime,
    *,
    tenant_id: str | None = None,
    reason: str,
    principal: str | None = None,
) -> Node:
    """A cordoned node takes bookings again (only a cordoned one: a joining node becomes ready by joining)."""
    row = await node_row(session, node_id, tenant_id=tenant_id, lock=True)
    if row.state not in ("cordoned", "ready"):
        raise ComputeError(ErrorCode.INVALID_STATE, f"node {row.name!r} is {row.state}, not cordoned", "/nodeId")
    decided = (Kind.UNCORDONED, reason, principal)
    return await _transition(session, node_id, "ready", now, tenant_id=tenant_id, decided=decided)


async def retire(session: AsyncSession, node_id: str, now: datetime, *, reason: str) -> Node:
    """The node is gone for good (`reason`: why, for the decision log). Its reservations must have ended
    first: nothing is force-released here.

    The pool and node locks make the count below final: a booking in flight on the node
    holds them shared until it commits, and a later one finds the node not ready.
    """
    row, pool = await lock_node_and_pool(session, node_id)
    active = await session.scalar(
        select(func.count())
        .select_from(ReservationRow)
        .where(ReservationRow.node_id == node_id, ReservationRow.state == "active")
    )
    if active and row.state != "retired":
        raise ComputeError(
            ErrorCode.INVALID_STATE, f"node {row.name!r} still holds {active} active reservation(s)", "/nodeId"
        )
    if _move(row, "retired", now):
        mark_changed(session, [node_id])
        await _record_node(session, row, now, Kind.RETIRED, reason)
    row.connected = False
    await session.flush()  # the count below must see this node retired
    if pool.state == "archiving" and not pool.policy.get("substrate"):
        live = await session.scalar(
            select(func.count()).select_from(NodeRow).where(NodeRow.pool_id == pool.id, NodeRow.state != "retired")
        )
        if not live:
            pool.state, pool.updated_at = "archived", now
    await session.flush()
    return await node_of(session, row)


async def find_live_node(session: AsyncSession, *, pool_id: str, name: str) -> Node | None:
    """The pool's node with this name that is not retired (the one a join under the name would get), if any."""
    row = await session.scalar(
        select(NodeRow).where(NodeRow.pool_id == pool_id, NodeRow.name == name, NodeRow.state != "retired")
    )
    return None if row is None else await node_of(session, row)


async def get_node(session: AsyncSession, *, node_id: str, tenant_id: str | None = None) -> Node:
    return await node_of(session, await node_row(session, node_id, tenant_id=tenant_id))


async def list_nodes(
    session: AsyncSession, *, tenant_id: str, pool_id: str | None = None, include_retired: bool = False
) -> list[Node]:
    query = select(NodeRow).where(NodeRow.tenant_id == tenant_id)
    if pool_id is not None:
        query = query.where(NodeRow.pool_id == pool_id)
    if not include_retired:
        query = query.where(NodeRow.state != "retired")
    rows = list(await session.scalars(query.order_by(NodeRow.name, NodeRow.created_at)))
    devices: dict[str, list[DeviceRow]] = {r.id: [] for r in rows}
    if rows:  # every listed node's devices in one statement, not one per node
        listed = query.with_only_columns(NodeRow.id).scalar_subquery()
        for device in await session.scalars(
            select(DeviceRow).where(DeviceRow.node_id.in_(listed)).order_by(DeviceRow.node_id, DeviceRow.index)
        ):
            devices.setdefault(device.node_id, []).append(device)
    return [_node(r, devices[r.id]) for r in rows]


class Nodes:
    """A tenant's view of its nodes: read them, label them, cordon and uncordon them."""

    def __init__(self, db: Database, clock: Clock, feed: ChangeFeed | None = None) -> None:
        self.db = db
        self.clock = clock
        self.feed = feed or ChangeFeed(db)

    def transaction(self) -> AbstractAsyncContextManager[AsyncSession]:
        """For system code (the gateway): a transaction whose node changes reach the change hook after commit."""
        return self.feed.transaction()

    async def get(self, tenant_id: str, node_id: str) -> Node:
        async with self.db.session() as session:
            return await get_node(session, node_id=node_id, tenant_id=tenant_id)

    async def quarantined(self, *, tenant_id: str | None = None) -> list[Quarantined]:
        """The GPUs of live nodes off sale for their health: one tenant's, or (None) every tenant's."""
        async with self.db.session() as session:
            return await quarantined_gpus(session, tenant_id=tenant_id)

    async def list(self, tenant_id: str, *, pool_id: str | None = None, include_retired: bool = False) -> list[Node]:
        async with self.db.session() as session:
            return await list_nodes(session, tenant_id=tenant_id, pool_id=pool_id, include_retired=include_retired)

    async def set_labels(self, tenant_id: str, node_id: str, labels: dict[str, str]) -> Node:
        """Replace the node's user labels; system labels cannot be set this way."""
        checked = check_labels(labels, "/labels")
        async with self.feed.transaction() as session:
            row = await node_row(session, node_id, tenant_id=tenant_id, lock=True)
            row.labels, row.updated_at = checked, self.clock.now()
            await session.flush()
            return await node_of(session, row)

    async def cordon(self, tenant_id: str, node_id: str) -> Node:
        async with self.feed.transaction() as session:
            return await cordon(
                session, node_id, self.clock.now(), tenant_id=tenant_id, reason="the tenant cordoned it",
                principal=acting(),
            )  # fmt: skip

    async def uncordon(self, tenant_id: str, node_id: str) -> Node:
        async with self.feed.transaction() as session:
            return await uncordon(
                session, node_id, self.clock.now(), tenant_id=tenant_id, reason="the tenant uncordoned it",
                principal=acting(),
            )  # fmt: skip
