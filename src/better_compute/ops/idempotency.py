"""Idempotency-Key: a create retried with the same key gets the first request's object, never a second one.

    resource_id = await claim(compute, tenant_id, "reservations.create", key, {"pool": ..., "gpus": ...}, new_id)
    key_id, value = await claim_once(compute, tenant_id, "api-keys.create", key, {}, new_api_key)

A key is scoped to its tenant and operation. The first request with it records, in a
transaction of its own, a hash of its parameters and the id its object WILL have; the
object is then made under that id, so the object's own commit is what records the result
(a booking and its key cannot part: there is no moment at which the booking has committed
and the key does not name it). A retry with the same key and parameters gets the same id
back and makes the object with it again, which finds it made and answers it. The same key
with other parameters is CONFLICT, naming the header. The primary key (tenant, operation,
key hash) makes the first request's row the only one on every replica. A record is kept for
RETENTION on the injected clock; every claim purges its tenant's older ones.

The client's key is the secret of its own retry, so the row keeps nothing it could be read
back from. Its id is HKDF-SHA256 of the key (bound to tenant and operation), never the key;
the request's hash is an HMAC under another key derived from it (a secret's value is in its
request, and a plain hash of it could be guessed at offline). An answer that carries a value
shown once (a new API key: its value is only ever stored as a hash) is kept sealed with
AES-256-GCM under a third derived key: neither the database nor the server's own secrets
open it, only a request that presents the same key as the same tenant within RETENTION.
Deriving the value from the key instead would make whoever saw the key (a log, a proxy) hold
the API key for as long as it lives; sealed, it lives as long as the row. The key's entropy
is then all that guards a sealed answer in a stolen database: use a random one (the CLI
sends a UUID4).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import ForeignKey, Index, LargeBinary, String, Table, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.server import Compute
from better_compute.store import Base, UTCDateTime

__all__ = ["HEADER", "MAX_KEY_LENGTH", "RETENTION", "IdempotencyKeyRow", "check_key", "claim", "claim_once"]

HEADER = "Idempotency-Key"
RETENTION = timedelta(hours=24)
"""How long a key answers with its first request's object."""
MAX_KEY_LENGTH = 255
_KEY_SHAPE = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}")  # visible ASCII, as a header carries it
_PATH = f"/headers/{HEADER}"
_INFO = b"better-compute/idempotency/v1"
_NONCE_BYTES = 12


class IdempotencyKeyRow(Base):
    __tablename__ = "ops_idempotency_keys"
    __table_args__ = (Index("ix_ops_idempotency_keys_tenant_id_created_at", "tenant_id", "created_at"),)

    tenant_id: Mapped[str] = mapped_column(String(64), ForeignKey("iam_tenants.id"), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    resource_id: Mapped[str] = mapped_column(String(64))
    sealed_answer: Mapped[bytes | None] = mapped_column(LargeBinary(), nullable=True)
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


def _derive(key: str, purpose: bytes, tenant_id: str, operation: str) -> bytes:
    info = b"\0".join((_INFO, purpose, tenant_id.encode(), operation.encode()))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key.encode())


def _request_hash(secret: bytes, params: dict[str, Any]) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, hashlib.sha256(canonical).digest(), hashlib.sha256).hexdigest()


def _unreadable() -> ComputeError:
    return ComputeError(
        ErrorCode.INVALID_STATE, f"the answer recorded for this {HEADER} cannot be opened: use a new key", _PATH
    )


async def _record(
    compute: Compute,
    tenant_id: str,
    operation: str,
    key: str,
    params: dict[str, Any],
    new: Callable[[], tuple[str, str | None]],
) -> tuple[str, str | None]:
    """The (id, one-time value) the key stands for: the first request's, or `new()`'s recorded now."""
    check_key(key)
    key_hash = _derive(key, b"index", tenant_id, operation).hex()
    digest = _request_hash(_derive(key, b"request", tenant_id, operation), params)
    sealer = AESGCM(_derive(key, b"answer", tenant_id, operation))
    resource_id, once = new()
    sealed = None
    if once is not None:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + sealer.encrypt(nonce, once.encode(), key_hash.encode())
    now = compute.clock.now()
    table = _KEYS
    scope = (table.c.tenant_id == tenant_id, table.c.operation == operation, table.c.key_hash == key_hash)
    async with compute.db.transaction() as session:
        await session.execute(
            delete(table).where(table.c.tenant_id == tenant_id, table.c.created_at <= now - RETENTION)
        )
        insert = pg_insert if compute.db.is_postgres else sqlite_insert
        await session.execute(
            insert(table)
            .values(
                tenant_id=tenant_id,
                operation=operation,
                key_hash=key_hash,
                request_hash=digest,
                resource_id=resource_id,
                sealed_answer=sealed,
                created_at=now,
            )
            .on_conflict_do_nothing()
        )
        query = select(table.c.request_hash, table.c.resource_id, table.c.sealed_answer).where(*scope)
        row = (await session.execute(query)).one()
    if not hmac.compare_digest(row.request_hash, digest):
        raise ComputeError(
            ErrorCode.CONFLICT,
            f"this {HEADER} was used with another request in the last {RETENTION.total_seconds() / 3600:.0f} h:"
            " use a new key for a new request",
            _PATH,
            reason="idempotency-key-reused",
        )
    if row.sealed_answer is None:
        return str(row.resource_id), None
    try:
        opened = sealer.decrypt(row.sealed_answer[:_NONCE_BYTES], row.sealed_answer[_NONCE_BYTES:], key_hash.encode())
    except InvalidTag:
        raise _unreadable() from None
    return str(row.resource_id), opened.decode()


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
    resource_id, _ = await _record(compute, tenant_id, operation, key, params, lambda: (new_resource_id(), None))
    return resource_id


async def claim_once(
    compute: Compute,
    tenant_id: str,
    operation: str,
    key: str,
    params: dict[str, Any],
    new: Callable[[], tuple[str, str]],
) -> tuple[str, str]:
    """As `claim`, for an object whose answer carries a value shown once: its id and that value, the
    first request's (opened from its sealed record) or `new()`'s, sealed and recorded now."""
    resource_id, once = await _record(compute, tenant_id, operation, key, params, new)
    if once is None:
        raise _unreadable()
    return resource_id, once
