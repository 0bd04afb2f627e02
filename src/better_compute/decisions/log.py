"""The writer: a typed event (`Decision`) and `record`, which adds it to the caller's transaction.

A decision is recorded by the code that makes it, in its own transaction, with one call:

    await record(session, now, Decision(Kind.RETIRED, tenant_id, "the machine is gone", node_id=...))

so the event commits with the change and rolls back with it. The reason passes the
redaction filter (core.redaction) on its way in, so a provider's error quoted in it never
stores a token. `suspended()` turns recording off in a context: the benchmarks measure
what the log costs by booking with and without it in one run. `acting_as(key_id)` names
who asks for the HTTP request it wraps (the API's authentication sets it), and `acting()`
reads it where a caller's decision is recorded.

On PostgreSQL a booking batch is one statement in autocommit (compute.batch): `logged`
makes the INSERT of its events part of that statement, so they commit with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import ARRAY, BindParameter, DateTime, String, Table, TextClause, bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.ids import new_id
from better_compute.core.redaction import redact

from .table import DecisionRow

__all__ = [
    "LOG",
    "MAX_REASON",
    "Decision",
    "Kind",
    "acting",
    "acting_as",
    "logged",
    "logged_params",
    "record",
    "recording",
    "suspended",
    "values_of",
]

LOG = cast(Table, DecisionRow.__table__)
MAX_REASON = 1024


class Kind(StrEnum):
    """What was decided: `<object>.<what happened to it>`."""

    BOOKED = "reservation.booked"
    RELEASED = "reservation.released"
    PREEMPTED = "reservation.preempted"
    ENDED = "reservation.ended"
    GPU_DEGRADED = "gpu.degraded"
    CORDONED = "node.cordoned"
    UNCORDONED = "node.uncordoned"
    RETIRED = "node.retired"
    REPLACED = "node.replaced"
    MACHINE_REPLACED = "node.machine-replaced"
    TOKEN_MADE = "join-token.made"
    TOKEN_USED_UP = "join-token.used-up"
    TOKEN_REVOKED = "join-token.revoked"
    PLAN_APPLIED = "fleet.applied"
    SUBSTRATE_STATE = "substrate.state-changed"


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision, its reason and the objects it concerns (ids; the node's name as well, as people know it)."""

    kind: Kind
    tenant_id: str
    reason: str
    pool_id: str | None = None
    node_id: str | None = None
    node_name: str | None = None
    reservation_id: str | None = None
    gpu_ids: tuple[str, ...] = ()
    principal: str | None = None
    """Who decided (an API key's id); None: the system itself."""
    details: Mapping[str, Any] = field(default_factory=dict)


_RECORDING: ContextVar[bool] = ContextVar("bc.decisions.recording", default=True)
_ACTING: ContextVar[str | None] = ContextVar("bc.decisions.acting", default=None)


def acting() -> str | None:
    """The API key id of who asks in this context (an HTTP request's caller); None: the system itself."""
    return _ACTING.get()


@contextmanager
def acting_as(key_id: str | None) -> Iterator[None]:
    """Decisions recorded in this context were asked for by `key_id`."""
    token = _ACTING.set(key_id)
    try:
        yield
    finally:
        _ACTING.reset(token)


def recording() -> bool:
    """Whether decisions are recorded in this context (always, but inside `suspended()`)."""
    return _RECORDING.get()


@contextmanager
def suspended() -> Iterator[None]:
    """Record nothing in this context (and the tasks it starts): for measuring the log's own cost."""
    token = _RECORDING.set(False)
    try:
        yield
    finally:
        _RECORDING.reset(token)


def values_of(decision: Decision, now: datetime) -> dict[str, Any]:
    """The row of one decision."""
    return {
        "id": new_id("evt"),
        "at": now,
        "tenant_id": decision.tenant_id,
        "kind": decision.kind.value,
        "reason": redact(decision.reason)[:MAX_REASON],
        "pool_id": decision.pool_id,
        "node_id": decision.node_id,
        "node_name": decision.node_name,
        "reservation_id": decision.reservation_id,
        "gpu_ids": list(decision.gpu_ids),
        "principal": decision.principal,
        "details": dict(decision.details),
    }


async def record(session: AsyncSession, now: datetime, *decisions: Decision) -> None:
    """Add the decisions to the caller's transaction (one INSERT for all of them)."""
    if decisions and _RECORDING.get():
        await session.execute(LOG.insert(), [values_of(d, now) for d in decisions])


_COLUMNS = ("id", "tenant_id", "kind", "reason", "pool_id", "node_id", "node_name", "reservation_id", "principal")


def logged(write: str, *, key: str, gpu_ids: str, binds: Iterable[BindParameter[Any]]) -> TextClause:
    """PostgreSQL: `write` (a SELECT that changes data and returns rows) with the INSERT of its decisions
    in the same statement. Each decision (`logged_params`) goes with the row whose column `key` is its
    reservation id; `gpu_ids` is the SQL of that row's GPU UUIDs as a JSON array; `binds` type the
    write's own parameters. The text is the same for every batch, so it is prepared once per connection."""
    arrays = ", ".join(f"CAST(:evt_{c} AS text[])" for c in _COLUMNS)
    # every part is constant SQL (this module's, or the caller's); the values are all bound
    sql = (
        f"WITH written AS ({write}), logged AS ("  # noqa: S608
        f"INSERT INTO {LOG.name} (at, gpu_ids, details, {', '.join(_COLUMNS)}) "
        f"SELECT CAST(:evt_at AS timestamptz), {gpu_ids}, CAST(e.details AS json), "
        f"{', '.join('e.' + c for c in _COLUMNS)} "
        f"FROM written JOIN unnest({arrays}, CAST(:evt_details AS text[])) AS e({', '.join(_COLUMNS)}, details) "
        f"ON e.reservation_id = written.{key}) "
        "SELECT * FROM written"
    )
    own = [bindparam(f"evt_{c}", type_=ARRAY(String)) for c in (*_COLUMNS, "details")]
    return text(sql).bindparams(*binds, *own, bindparam("evt_at", type_=DateTime(timezone=True)))


def logged_params(now: datetime, decisions: list[Decision]) -> dict[str, Any]:
    """The bind parameters of `logged`'s INSERT: one array per column, a decision per position."""
    rows = [values_of(d, now) for d in decisions]
    params: dict[str, Any] = {f"evt_{c}": [r[c] for r in rows] for c in _COLUMNS}
    params["evt_details"] = [json.dumps(r["details"]) for r in rows]
    params["evt_at"] = now
    return params
