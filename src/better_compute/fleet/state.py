"""Reading the fleet's state from the store, and holding the tenant's apply lock.

`lock_tenant` is the first statement of every apply: an upsert of the tenant's row
in `fleet_states`. On PostgreSQL it holds that row locked until commit, on SQLite
it takes the write lock, so two applies for one tenant run one after the other
and each plans against the state the other left.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.compute import Pool, active_on_pools, list_nodes
from better_compute.compute.pools import list_pools
from better_compute.compute.sites import list_sites
from better_compute.fleet.snapshot import AccountState, NodeState, PoolState, SiteState, Snapshot
from better_compute.kubernetes.substrates.substrate_rows import live_substrates, placed_nodes
from better_compute.store import Base, UTCDateTime
from better_compute.vps.accounts import account_holds, list_accounts

__all__ = ["FleetStateRow", "hold_loaded_rows", "lock_tenant", "read_snapshot"]


class FleetStateRow(Base):
    __tablename__ = "fleet_states"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer())
    fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    applied_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


def hold_loaded_rows(session: AsyncSession) -> None:
    """Keep every row this session loads or writes referenced until the session ends.

    A session's identity map holds clean rows weakly, so a row that the service
    functions read and then drop (the tenant, a site) is gone when the next pool
    asks for it by primary key, and is read again: two extra statements per pool in
    an apply of a thousand. Held, those lookups are answered from memory. This is
    SQLAlchemy's documented "strong referencing" recipe, scoped to one session.
    """
    held: list[object] = session.info.setdefault("bc.fleet.held_rows", [])

    def hold(_session: object, instance: object) -> None:
        held.append(instance)

    sync = session.sync_session
    for name in ("loaded_as_persistent", "pending_to_persistent"):
        event.listen(sync, name, hold)


async def lock_tenant(session: AsyncSession, tenant_id: str) -> FleetStateRow:
    """The tenant's row, created when missing, locked for the rest of the transaction."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(FleetStateRow).values(tenant_id=tenant_id, revision=0)
    statement = statement.on_conflict_do_update(
        index_elements=[FleetStateRow.tenant_id], set_={"revision": FleetStateRow.revision}
    )
    await session.execute(statement)
    row = await session.get(FleetStateRow, tenant_id, populate_existing=True)
    if row is None:  # the upsert above made it; reaching here means the store lost a write
        raise RuntimeError(f"fleet state row of tenant {tenant_id} vanished inside its transaction")
    return row


async def read_snapshot(session: AsyncSession, tenant_id: str, *, nodes: bool = False) -> Snapshot:
    """Sites, provider accounts and pools of the tenant, by name; with `nodes`, also each active
    pool's substrate Nodes and their bookings (what a plan shows, and an apply does not need)."""
    sites = await list_sites(session, tenant_id=tenant_id)
    site_names = {s.id: s.name for s in sites}
    accounts = await list_accounts(session, tenant_id=tenant_id)
    pools = await list_pools(session, tenant_id=tenant_id, include_archived=True)
    substrates = await live_substrates(session, tenant_id)
    return Snapshot.of(
        [SiteState(s.id, s.name, s.kind, s.region or "") for s in sites],
        [AccountState(a.id, a.name, a.provider, a.config) for a in accounts],
        [
            PoolState(
                p.id,
                p.name,
                site_names[p.site_id],
                p.pool_class,
                p.gpu_model or "",
                p.policy,
                p.state,
                None if p.policy.get("substrate") else substrates.get(p.id),
            )
            for p in pools
        ],
        await account_holds(session, tenant_id=tenant_id),
        await _read_nodes(session, tenant_id, [p for p in pools if p.state == "active"]) if nodes else None,
    )


async def _read_nodes(session: AsyncSession, tenant_id: str, pools: list[Pool]) -> dict[str, tuple[NodeState, ...]]:
    """Each pool's listed Nodes with the active bookings on the pool node bcd runs on it."""
    names = {p.id: p.name for p in pools}
    members = {
        (n.pool_id, n.kubernetes_node_name): n.id
        for n in await list_nodes(session, tenant_id=tenant_id)
        if n.pool_id in names and n.kubernetes_node_name
    }
    bookings: dict[str, list[tuple[int, str]]] = {}
    for reservation in await active_on_pools(session, list(names)):
        bookings.setdefault(reservation.node_id, []).append((reservation.gpu_count, reservation.tenant_id))
    found: dict[str, list[NodeState]] = {}
    for placed in await placed_nodes(session, tenant_id):
        if placed.pool_id not in names:
            continue
        member = members.get((placed.pool_id, placed.name))
        held = bookings.get(member or "", [])
        found.setdefault(names[placed.pool_id], []).append(
            NodeState(
                placed.name,
                placed.flavor,
                placed.zone,
                joined=member is not None,
                reservations=len(held),
                gpus=sum(g for g, _ in held),
                tenants=tuple(sorted({t for _, t in held})),
            )
        )
    return {name: tuple(states) for name, states in found.items()}
