"""Idempotency-Key: a create retried with the same key gets the first request's object, never a second one.

    resource_id = await claim(compute, tenant_id, "reservations.create", key, {"pool": ..., "gpus": ...}, new_id)

A key is scoped to its tenant and operation. The first request with it records, in a
transaction of its own, a hash of its parameters and the id its object WILL have; the
object is then made under that id, so the object's own commit is what records the result
(a booking and its key cannot part: there is no moment at which the booking has committed
and the key does not name it). A retry with the same key and parameters gets the same id
back and makes the object with it again, which finds it made and answers it. The same key
with other parameters is CONFLICT, naming the header. The primary key (tenant, operation,
key) makes the first request's row the only one on every replica. A record is kept for
RETENTION on the injected clock; after that the key is free for a new request.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ForeignKey, String, Table, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.server import Compute
from better_compute.store import Base, UTCDateTime

__all__ = ["HEADER", "MAX_KEY_LENGTH", "RETENTION", "IdempotencyKeyRow", "check_key", "claim"]

HEADER = "Idempotency-Key"
RETENTION = timedelta(hours=24)
"""How long a key answers with its first request's object."""
MAX_KEY_LENGTH = 255
_KEY_SHAPE = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}")  # visible ASCII, as a header carries it
_PATH = f"/headers/{HEADER}"


class IdempotencyKeyRow(Base):
    __tablename__ = "ops_idempotency_keys"

    tenant_id: Mapped[str] = mapped_column(String(64), ForeignKey("iam_tenants.id"), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    resource_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


_KEYS = cast(Table, IdempotencyKeyRow.__table__)


def check_key(key: str) -> str:
    """The key, or INVALID_INPUT naming the header: 1 to 255 visible ASCII characters."""
    if not _KEY_SHAPE.fullmatch(key):
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"the {HEADER} header is 1 to {MAX_KEY_LENGTH} visible ASCII characters (a UUID is a good one)",
            _PATH,
        )
    return key


def _hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def claim(
    compute: Compute,
    tenant_id: str,
    operation: str,
    key: str,
    params: dict[str, Any],
    new_resource_id: Callable[[], str],
) -> str:
    """The id of the object `key` stands for: the one its first request (with the same `params`,
    within RETENTION) recorded, or a new one recorded now. CONFLICT if the key was used with other params."""
    check_key(key)
    digest = _hash(params)
    now = compute.clock.now()
    table = _KEYS
    scope = (table.c.tenant_id == tenant_id, table.c.operation == operation, table.c.key == key)
    async with compute.db.transaction() as session:
        await session.execute(delete(table).where(*scope, table.c.created_at <= now - RETENTION))
        insert = pg_insert if compute.db.is_postgres else sqlite_insert
        await session.execute(
            insert(table)
            .values(
                tenant_id=tenant_id,
                operation=operation,
                key=key,
                request_hash=digest,
                resource_id=new_resource_id(),
                created_at=now,
            )
            .on_conflict_do_nothing()
        )
        row = (await session.execute(select(table.c.request_hash, table.c.resource_id).where(*scope))).one()
    if row.request_hash != digest:
        raise ComputeError(
            ErrorCode.CONFLICT,
            f"this {HEADER} was used with another request in the last {RETENTION.total_seconds() / 3600:.0f} h:"
            " use a new key for a new request",
            _PATH,
            reason="idempotency-key-reused",
        )
    return str(row.resource_id)
