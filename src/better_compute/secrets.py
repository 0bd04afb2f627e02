"""Sealed secrets and `secret://<tenant>/<id>` references.

A secret value (a provider API token, say) enters once, through `create`, and from
then on only its reference travels: in FleetConfig documents, API answers and logs.
The value is sealed at rest with AES-256-GCM under a key derived (HKDF-SHA256) from
the server's `secret`; the associated data binds each ciphertext to its tenant and
id, so a row copied to another tenant does not open. `resolve` is for server code
only: it is not routed to any API, and a tenant asking for another tenant's
reference gets NOT_FOUND, the same answer as for a reference that does not exist.
Every value that is sealed or opened is registered with the redaction filter.

The table lives in the "iam" migration branch (iam_0002).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import ForeignKey, LargeBinary, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.core.redaction import redact_value
from better_compute.store import Base, Database, UTCDateTime

__all__ = ["Sealer", "SecretRecord", "Secrets", "is_reference", "parse_reference"]

SCHEME = "secret://"
MIN_SERVER_SECRET = 32
MAX_VALUE_BYTES = 64 * 1024
_VERSION = b"\x01"
_NONCE_BYTES = 12
_PART = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
_REFERENCE = re.compile(rf"secret://({_PART})/({_PART})")


class SecretRow(Base):
    __tablename__ = "iam_secrets"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"), index=True)
    sealed: Mapped[bytes] = mapped_column(LargeBinary())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


@dataclass(frozen=True, slots=True)
class SecretRecord:
    """What a listing shows of a secret: its reference, never its value."""

    id: str
    tenant_id: str
    reference: str
    created_at: datetime


def is_reference(value: object) -> bool:
    """Whether `value` is shaped like a secret reference (it may still not exist)."""
    return isinstance(value, str) and _REFERENCE.fullmatch(value) is not None


def parse_reference(reference: object, *, path: str = "/reference") -> tuple[str, str]:
    """(tenant id, secret id) of a reference, or INVALID_INPUT at `path`.

    The message never repeats the value: a plain secret pasted where a reference
    belongs must not end up in an error, a log or an API answer.
    """
    match = _REFERENCE.fullmatch(reference) if isinstance(reference, str) else None
    if match is None:
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            "expected a secret reference of the form secret://<tenant>/<id>, never a plain value",
            path,
        )
    return match.group(1), match.group(2)


def reference_of(tenant_id: str, secret_id: str) -> str:
    return f"{SCHEME}{tenant_id}/{secret_id}"


class Sealer:
    """AES-256-GCM with a key derived from the server secret; the tenant and id are bound as associated data."""

    def __init__(self, server_secret: str) -> None:
        if not isinstance(server_secret, str) or len(server_secret) < MIN_SERVER_SECRET:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"the server secret must be at least {MIN_SERVER_SECRET} characters", "/secret"
            )
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"better-compute", info=b"sealed-secrets/v1").derive(
            server_secret.encode()
        )
        self._aead = AESGCM(key)

    def seal(self, tenant_id: str, secret_id: str, value: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return _VERSION + nonce + self._aead.encrypt(nonce, value.encode(), _bound(tenant_id, secret_id))

    def open(self, tenant_id: str, secret_id: str, sealed: bytes) -> str:
        if sealed[:1] != _VERSION:
            raise ComputeError(ErrorCode.INVALID_STATE, f"secret {secret_id!r} is sealed in an unknown format")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, _bound(tenant_id, secret_id)).decode()
        except InvalidTag as exc:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"secret {secret_id!r} does not open with this server's secret (was the secret changed?)",
            ) from exc


def _bound(tenant_id: str, secret_id: str) -> bytes:
    return f"{tenant_id}/{secret_id}".encode()


def _check_value(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ComputeError(ErrorCode.INVALID_INPUT, "a secret value is a non-empty string", path)
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"a secret value is at most {MAX_VALUE_BYTES} bytes", path)
    if is_reference(value):
        raise ComputeError(ErrorCode.INVALID_INPUT, "a secret value cannot itself be a secret reference", path)
    return value


async def create_secret(session: AsyncSession, sealer: Sealer, *, now: datetime, tenant_id: str, value: str) -> str:
    """Seal `value` for the tenant inside the caller's transaction; returns its reference."""
    value = _check_value(value, "/value")
    redact_value(value)
    secret_id = new_id("sec")
    session.add(
        SecretRow(id=secret_id, tenant_id=tenant_id, sealed=sealer.seal(tenant_id, secret_id, value), created_at=now)
    )
    try:
        # The tenant is checked by the foreign key: secrets sits beside iam in the layers, not above it.
        await session.flush()
    except IntegrityError as exc:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no tenant {tenant_id!r}", "/tenantId") from exc
    return reference_of(tenant_id, secret_id)


async def resolve_secret(
    session: AsyncSession, sealer: Sealer, reference: str, *, tenant_id: str, path: str = "/reference"
) -> str:
    """The value behind a reference the tenant owns; NOT_FOUND for anyone else's."""
    owner, secret_id = parse_reference(reference, path=path)
    row = await session.get(SecretRow, secret_id) if owner == tenant_id else None
    if row is None or row.tenant_id != tenant_id:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no secret {reference!r} for this tenant", path)
    value = sealer.open(row.tenant_id, row.id, row.sealed)
    redact_value(value)
    return value


class Secrets:
    """Sealed secrets, each call in a transaction of its own."""

    def __init__(self, db: Database, clock: Clock, secret: str) -> None:
        self.db = db
        self.clock = clock
        self.sealer = Sealer(secret)

    async def create(self, tenant_id: str, value: str) -> str:
        async with self.db.transaction() as session:
            return await create_secret(session, self.sealer, now=self.clock.now(), tenant_id=tenant_id, value=value)

    async def resolve(self, reference: str, *, tenant_id: str, path: str = "/reference") -> str:
        """Server code only: never expose this through an API."""
        async with self.db.session() as session:
            return await resolve_secret(session, self.sealer, reference, tenant_id=tenant_id, path=path)

    async def list(self, tenant_id: str) -> list[SecretRecord]:
        """The tenant's secrets, oldest first; the sealed values are not even read."""
        query = (
            select(SecretRow.id, SecretRow.created_at)
            .where(SecretRow.tenant_id == tenant_id)
            .order_by(SecretRow.created_at, SecretRow.id)
        )
        async with self.db.session() as session:
            rows = (await session.execute(query)).all()
        return [SecretRecord(r.id, tenant_id, reference_of(tenant_id, r.id), r.created_at) for r in rows]

    async def delete(self, tenant_id: str, reference: str) -> None:
        """Forget a secret; deleting one that is gone is harmless, another tenant's is NOT_FOUND."""
        owner, secret_id = parse_reference(reference)
        if owner != tenant_id:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no secret {reference!r} for this tenant", "/reference")
        async with self.db.transaction() as session:
            await session.execute(delete(SecretRow).where(SecretRow.id == secret_id, SecretRow.tenant_id == tenant_id))

    @staticmethod
    def parse_reference(reference: str, *, path: str = "/reference") -> tuple[str, str]:
        return parse_reference(reference, path=path)

    @staticmethod
    def is_reference(value: object) -> bool:
        return is_reference(value)
