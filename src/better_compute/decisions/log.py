"""The writer: a typed event (`Decision`) and `record`, which adds it to the caller's transaction.

A decision is recorded by the code that makes it, in its own transaction, with one call:

    await record(session, now, Decision(Kind.RETIRED, tenant_id, "the machine is gone", node_id=...))

so the event commits with the change and rolls back with it. The reason passes the
redaction filter (core.redaction) on its way in, so a provider's error quoted in it never
stores a token. `suspended()` turns recording off in a context: the benchmarks measure
what the log costs by booking with and without it in one run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.ids import new_id
from better_compute.core.redaction import redact

from .table import DecisionRow

__all__ = ["LOG", "MAX_REASON", "Decision", "Kind", "record", "recording", "suspended", "values_of"]

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
    TOKEN_MADE = "join-token.made"
    TOKEN_USED_UP = "join-token.used-up"
    TOKEN_REVOKED = "join-token.revoked"
    PLAN_APPLIED = "fleet.applied"


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
