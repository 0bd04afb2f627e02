"""Ending reservations, set-based and exactly once: one call, or a batch of concurrent releases.

`end_reservations` ends any number of reservations in the caller's transaction with a fixed
number of statements whatever their number:

1. read the reservations asked for, with their nodes' names, locked `FOR UPDATE` in id order
   (on PostgreSQL; SQLite's transaction holds the write lock already), so that what is read
   stays true until the commit and two transactions ending overlapping sets never deadlock on
   them (end_reservations_on_node locks its node's in the same order);
2. answer in request order: a reservation that does not exist or is another tenant's is
   NOT_FOUND; the first request that may end an active one ends it, as it asks (released,
   preempted or ended, with its reason); every later request for it, and every request for one
   that has ended already, gets the reservation as it now stands and ends nothing;
3. one guarded `UPDATE ... WHERE state = 'active' ... RETURNING` of all of those: only the rows
   it returns are ended here, and only their devices are freed (one UPDATE) and their GPUs
   refunded (one UPDATE per tenant and model), so nothing is refunded or freed twice however
   many callers ask at once, in one batch or in several, on one replica or several;
4. the nodes marked changed (the change feed fires after commit) and one decision per
   reservation ended (one INSERT), in request order.

On SQLite these are separate statements. On PostgreSQL they are ONE statement (`_END`: the
lock, the choice of each reservation's first request (`DISTINCT ON`), the guarded UPDATE, the
devices, the refund and, unless the log is `suspended()`, the decisions, as data-modifying CTEs
over array parameters, so its text never changes and is prepared once per connection); each
request is then answered in Python from the rows it returns. A batch of releases is one round
trip instead of seven (BEGIN, the read, three UPDATEs, the INSERT, COMMIT): on the shared machine those
round trips, not Python, were what bounded it.

`BatchReleaser` is the group commit of `Reservations.release` and `Reservations.end`
(group.GroupCommit): concurrent releases of one process share one transaction (on PostgreSQL
the one statement, in autocommit), where a deadlock or serialization failure with another
replica undoes the batch and runs it again.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BindParameter, DateTime, Integer, String, bindparam, case, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.core.redaction import redact
from better_compute.decisions import Decision, Kind, record, recording
from better_compute.decisions.log import MAX_REASON

from .booking import DEV, NODE, RES, reservation_of
from .changes import ChangeFeed, mark_changed, take_changed
from .group import GroupCommit
from .models import Reservation
from .quotas import refund

__all__ = ["END_STATES", "BatchReleaser", "Ended", "Ending", "check_state", "end_reservations"]

END_STATES = ("released", "preempted", "ended")
_ENDED_AS = {"released": Kind.RELEASED, "preempted": Kind.PREEMPTED, "ended": Kind.ENDED}
ATTEMPTS = 8
# 40P01: a deadlock with another replica's transaction; 40001: a serialization failure. Each undoes it all.
_RETRY = ("40001", "40P01")


@dataclass(frozen=True, slots=True)
class Ending:
    """One request to end a reservation."""

    reservation_id: str
    state: str = "released"
    tenant_id: str | None = None
    """The tenant asking (its own reservations only); None: the system."""
    reason: str = ""
    """Why, for the decision log."""
    principal: str | None = None
    """Who asked (an API key's id), for the decision log."""


Ended = tuple[Reservation, bool]
"""The reservation as it now stands, and whether this request ended it."""


def _not_found(reservation_id: str) -> ComputeError:
    return ComputeError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id!r}", "/reservationId")


def check_state(state: str) -> None:
    if state not in END_STATES:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"a reservation ends as one of {', '.join(END_STATES)}", "/state")


async def end_reservations(
    session: AsyncSession, now: datetime, endings: Sequence[Ending]
) -> list[Ended | ComputeError]:
    """End the active reservations asked for, each at most once, in the caller's transaction.

    Each request gets its own answer, in order (see the module's docstring)."""
    answers: list[Ended | ComputeError | None] = [None] * len(endings)
    asked: list[int] = []
    for position, ending in enumerate(endings):
        try:
            check_state(ending.state)
        except ComputeError as exc:
            answers[position] = exc
            continue
        asked.append(position)
    if not asked:
        return [a for a in answers if a is not None]
    if session.get_bind().dialect.name == "postgresql":
        await _end_in_one_statement(session, now, endings, asked, answers)
    else:
        await _end_statement_by_statement(session, now, endings, asked, answers)
    return [a for a in answers if a is not None]


async def _end_statement_by_statement(
    session: AsyncSession, now: datetime, endings: Sequence[Ending], asked: list[int], answers: list[Any]
) -> None:
    rows = {row.id: row for row in await _locked(session, sorted({endings[p].reservation_id for p in asked}))}
    winners: dict[str, int] = {}  # reservation id -> the position of the request that ends it
    for position in asked:
        ending = endings[position]
        row = rows.get(ending.reservation_id)
        if row is None or (ending.tenant_id is not None and row.tenant_id != ending.tenant_id):
            answers[position] = _not_found(ending.reservation_id)
        elif row.state == "active" and ending.reservation_id not in winners:
            winners[ending.reservation_id] = position
    ended = await _end_rows(session, now, {rid: endings[p].state for rid, p in winners.items()})
    if ended:
        await _free_and_refund(session, now, ended, [(endings[p], rows[rid]) for rid, p in winners.items()])
    for position in asked:
        if answers[position] is None:
            rid = endings[position].reservation_id
            if rid in ended:
                answers[position] = (reservation_of(ended[rid]), winners[rid] == position)
            else:  # ended before this transaction, or (never, given the lock) by another meanwhile
                answers[position] = (reservation_of(rows[rid]), False)


async def _locked(session: AsyncSession, reservation_ids: list[str]) -> Sequence[Any]:
    """The reservations, each with its node's name, locked in id order (PostgreSQL; SQLite holds the write lock)."""
    query = (
        select(*RES.c, NODE.c.name.label("node_name"))
        .select_from(RES.outerjoin(NODE, NODE.c.id == RES.c.node_id))
        .where(RES.c.id.in_(reservation_ids))
        .order_by(RES.c.id)
        .with_for_update(of=RES)
    )
    return (await session.execute(query)).all()


async def _end_rows(session: AsyncSession, now: datetime, states: dict[str, str]) -> dict[str, Any]:
    """Move the reservations still active to their end states (one guarded UPDATE): the rows it changed."""
    if not states:
        return {}
    distinct = set(states.values())
    state: Any = distinct.pop() if len(distinct) == 1 else case(states, value=RES.c.id)
    result = await session.execute(
        update(RES)
        .where(RES.c.id.in_(sorted(states)), RES.c.state == "active")
        .values(state=state, ended_at=now)
        .returning(*RES.c)
    )
    return {row.id: row for row in result.all()}


async def _free_and_refund(
    session: AsyncSession, now: datetime, ended: dict[str, Any], asked: list[tuple[Ending, Any]]
) -> None:
    """Free the ended reservations' devices, refund their GPUs and record why each ended."""
    freed = await session.execute(
        update(DEV)
        .where(DEV.c.reservation_id.in_(sorted(ended)))
        .values(reservation_id=None)
        .returning(DEV.c.id, DEV.c.idx, DEV.c.uuid)
    )
    # RETURNING gives the new reservation_id, NULL: each device's holder is the reservation that lists it
    holder = {device_id: row.id for row in ended.values() for device_id in row.device_ids}
    gpus: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for device in freed.all():
        if device.id in holder:
            gpus[holder[device.id]].append((device.idx, device.uuid))
    refunds: dict[tuple[str, str], int] = defaultdict(int)
    for row in ended.values():
        refunds[(row.tenant_id, row.gpu_model)] += row.gpu_count
    for (tenant_id, gpu_model), count in sorted(refunds.items()):
        await refund(session, now=now, tenant_id=tenant_id, gpu_model=gpu_model, count=count)
    mark_changed(session, sorted({row.node_id for row in ended.values()}))
    decisions = []
    for ending, read in asked:
        row = ended.get(ending.reservation_id)
        if row is None:
            continue
        decisions.append(
            Decision(
                _ENDED_AS[row.state], row.tenant_id, ending.reason, pool_id=row.pool_id, node_id=row.node_id,
                node_name=read.node_name, reservation_id=row.id,
                gpu_ids=tuple(uuid for _, uuid in sorted(gpus[row.id])), principal=ending.principal,
            )
        )  # fmt: skip
    await record(session, now, *decisions)


# PostgreSQL: the whole of end_reservations is one statement (see the module's docstring for its steps); its
# parameters are arrays, so its text is the same for every batch: prepared once per connection.
_END = """
WITH asked AS (
  SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:tenants AS text[]), CAST(:states AS text[]),
                       CAST(:positions AS integer[])) AS a(id, tenant_id, state, pos)
), locked AS (
  SELECT r.* FROM compute_reservations r WHERE r.id = ANY(CAST(:ids AS text[])) ORDER BY r.id FOR UPDATE
), won AS (
  SELECT DISTINCT ON (a.id) a.id, a.state, a.pos FROM asked a JOIN locked l ON l.id = a.id
  WHERE l.state = 'active' AND (a.tenant_id IS NULL OR a.tenant_id = l.tenant_id) ORDER BY a.id, a.pos
), ended AS (
  UPDATE compute_reservations r SET state = won.state, ended_at = CAST(:now AS timestamptz)
  FROM won WHERE r.id = won.id AND r.state = 'active' RETURNING r.*, won.pos
), freed AS (
  UPDATE compute_devices d SET reservation_id = NULL FROM ended e WHERE d.reservation_id = e.id
  RETURNING e.id AS rid, d.idx, d.uuid
), refunded AS (
  UPDATE compute_quotas q SET used = q.used - s.n, updated_at = CAST(:now AS timestamptz)
  FROM (SELECT tenant_id, gpu_model, sum(gpu_count) AS n FROM ended GROUP BY tenant_id, gpu_model) s
  WHERE q.tenant_id = s.tenant_id AND q.gpu_model = s.gpu_model RETURNING q.tenant_id
){logged}
SELECT l.id, l.tenant_id, l.pool_id, l.node_id, l.gpu_model, l.gpu_count, l.device_ids, l.binding, l.spot,
       coalesce(e.state, l.state) AS state, l.created_at, coalesce(e.ended_at, l.ended_at) AS ended_at,
       e.pos AS won
FROM locked l LEFT JOIN ended e ON e.id = l.id
"""
_LOGGED = """, logged AS (
  INSERT INTO decisions_log (id, at, tenant_id, kind, reason, pool_id, node_id, node_name, reservation_id, gpu_ids,
                             principal, details)
  SELECT ev.id, CAST(:now AS timestamptz), e.tenant_id, 'reservation.' || e.state, ev.reason, e.pool_id, e.node_id,
         n.name, e.id, to_json(ARRAY(SELECT f.uuid FROM freed f WHERE f.rid = e.id ORDER BY f.idx)), ev.principal,
         CAST('{}' AS json)
  FROM ended e
  JOIN unnest(CAST(:evt_positions AS integer[]), CAST(:evt_ids AS text[]), CAST(:evt_reasons AS text[]),
              CAST(:evt_principals AS text[])) AS ev(pos, id, reason, principal) ON ev.pos = e.pos
  LEFT JOIN compute_nodes n ON n.id = e.node_id
  ORDER BY e.pos
)"""
_END_TYPES: dict[str, Any] = {c.name: c.type for c in RES.c} | {"won": Integer()}  # by name
_BINDS: tuple[BindParameter[Any], ...] = (
    *(bindparam(name, type_=ARRAY(String)) for name in ("ids", "tenants", "states")),
    bindparam("positions", type_=ARRAY(Integer)),
    bindparam("now", type_=DateTime(timezone=True)),
)
_EVENT_BINDS: tuple[BindParameter[Any], ...] = (
    bindparam("evt_positions", type_=ARRAY(Integer)),
    *(bindparam(name, type_=ARRAY(String)) for name in ("evt_ids", "evt_reasons", "evt_principals")),
)
_END_UNLOGGED = text(_END.format(logged="")).bindparams(*_BINDS).columns(**_END_TYPES)
_END_LOGGED = text(_END.format(logged=_LOGGED)).bindparams(*_BINDS, *_EVENT_BINDS).columns(**_END_TYPES)


async def _end_in_one_statement(
    session: AsyncSession, now: datetime, endings: Sequence[Ending], asked: list[int], answers: list[Any]
) -> None:
    """PostgreSQL: lock, end, free, refund and record in one statement (`_END`), then answer each request."""
    keep = recording()
    params: dict[str, Any] = {
        "ids": [endings[p].reservation_id for p in asked],
        "tenants": [endings[p].tenant_id for p in asked],
        "states": [endings[p].state for p in asked],
        "positions": asked,
        "now": now,
    }
    if keep:
        params |= {
            "evt_positions": asked,
            "evt_ids": [new_id("evt") for _ in asked],
            "evt_reasons": [redact(endings[p].reason)[:MAX_REASON] for p in asked],
            "evt_principals": [endings[p].principal for p in asked],
        }
    result = await session.execute(_END_LOGGED if keep else _END_UNLOGGED, params)
    rows = {row.id: row for row in result.all()}
    for position in asked:
        ending = endings[position]
        row = rows.get(ending.reservation_id)
        if row is None or (ending.tenant_id is not None and row.tenant_id != ending.tenant_id):
            answers[position] = _not_found(ending.reservation_id)
        else:
            answers[position] = (reservation_of(row), row.won == position)
    mark_changed(session, sorted({row.node_id for row in rows.values() if row.won is not None}))


class BatchReleaser(GroupCommit[Ending, Reservation]):
    """Concurrent releases and ends of one process, ended a batch per transaction."""

    def __init__(self, feed: ChangeFeed, clock: Clock) -> None:
        super().__init__(feed)
        self.clock = clock

    async def _attempts(self, batch: list[Ending]) -> tuple[list[Reservation | Exception], list[str]]:
        for _ in range(ATTEMPTS):
            try:
                async with self._session() as session:
                    outcomes = await end_reservations(session, self.clock.now(), batch)
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) not in _RETRY:
                    raise
                await asyncio.sleep(0)
                continue
            results: list[Reservation | Exception] = [o if isinstance(o, ComputeError) else o[0] for o in outcomes]
            return results, take_changed(session)
        busy: Exception = ComputeError(ErrorCode.UNAVAILABLE, "too many concurrent releases; retry", "/reservationId")
        return [busy] * len(batch), []
