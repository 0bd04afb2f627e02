"""Sealed secrets and `secret://<tenant>/<id>` references.

A secret value (a provider API token, say) enters once, through `create`, and from
then on only its reference travels: in FleetConfig documents, API answers and logs.
The value is sealed at rest with AES-256-GCM under a key derived (HKDF-SHA256) from
the server's `secret`, and carries that key's id. Older secrets given as previous ones
still open what they sealed, and `reseal` moves every value to the newest key, so the
server secret can be rotated (docs/operations.md); the associated data binds each ciphertext to its tenant and
id, so a row copied to another tenant does not open. `resolve` is for server code
only: it is not routed to any API, and a tenant asking for another tenant's
reference gets NOT_FOUND, the same answer as for a reference that does not exist.
Every value that is sealed or opened is registered with the redaction filter.

The table lives in the "iam" migration branch (iam_0002).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import ForeignKey, LargeBinary, String, delete, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.core.redaction import redact_value
from better_compute.store import Base, Database, UTCDateTime

__all__ = ["ResealReport", "Sealer", "SecretRecord", "Secrets", "check_value", "is_reference", "parse_reference"]

SCHEME = "secret://"
MIN_SERVER_SECRET = 32
MAX_VALUE_BYTES = 64 * 1024
_LEGACY_VERSION = b"\x01"
"""Format 1: version, nonce, ciphertext; no key id (values sealed before rotation existed)."""
_VERSION = b"\x02"
"""Format 2: version, key id, nonce, ciphertext."""
_KEY_ID_BYTES = 8
_NONCE_BYTES = 12
_SALT = b"better-compute"
_RESEAL_PAGE = 200
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


@dataclass(frozen=True, slots=True)
class ResealReport:
    """What `reseal` did: the newest key's id, how many values it sealed again under it, how
    many were under it already, and the references of those no configured secret opens."""

    key_id: str
    resealed: int
    current: int
    unreadable: tuple[str, ...]


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
    """AES-256-GCM under keys derived from the server secrets; the tenant and id are bound as associated data.

    The first secret is the newest: it seals, and every one given opens. Each sealed value
    names its key (`key_id`), so a value opens with the right key at once and `reseal`
    knows which values are not yet under the newest. Values sealed before key ids existed
    (format 1) carry none: every key is tried on them.
    """

    def __init__(self, server_secret: str, previous: Sequence[str] = ()) -> None:
        keys: dict[str, AESGCM] = {}
        for index, secret in enumerate([server_secret, *previous]):
            if not isinstance(secret, str) or len(secret) < MIN_SERVER_SECRET:
                path = "/secret" if index == 0 else f"/previousSecrets/{index - 1}"
                raise ComputeError(
                    ErrorCode.INVALID_INPUT, f"a server secret must be at least {MIN_SERVER_SECRET} characters", path
                )
            material = secret.encode()
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=b"sealed-secrets/v1").derive(material)
            key_id = HKDF(algorithm=hashes.SHA256(), length=_KEY_ID_BYTES, salt=_SALT, info=b"sealed-secrets/key-id")
            keys.setdefault(key_id.derive(material).hex(), AESGCM(key))  # a secret given twice counts once
        self._keys = keys
        self.key_id = next(iter(keys))
        """The newest key's id: a one-way fingerprint of the server secret, safe to show."""

    def seal(self, tenant_id: str, secret_id: str, value: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        body = self._keys[self.key_id].encrypt(nonce, value.encode(), _bound(tenant_id, secret_id))
        return _VERSION + bytes.fromhex(self.key_id) + nonce + body

    @staticmethod
    def key_id_of(sealed: bytes) -> str | None:
        """The id of the key that sealed `sealed`; None for a value sealed before key ids."""
        return sealed[1 : 1 + _KEY_ID_BYTES].hex() if sealed[:1] == _VERSION else None

    def is_current(self, sealed: bytes) -> bool:
        """Whether `sealed` is under the newest key (nothing for `reseal` to do)."""
        return self.key_id_of(sealed) == self.key_id

    def open(self, tenant_id: str, secret_id: str, sealed: bytes) -> str:
        bound = _bound(tenant_id, secret_id)
        if sealed[:1] == _VERSION:
            key_id = self.key_id_of(sealed)
            key = self._keys.get(key_id or "")
            if key is None:
                raise ComputeError(
                    ErrorCode.INVALID_STATE,
                    f"secret {secret_id!r} is sealed with key {key_id}, which is not among this server's secrets "
                    "(pass the secret it was sealed with as a previous secret: BC_PREVIOUS_SECRETS)",
                )
            start = 1 + _KEY_ID_BYTES
            candidates = [key]
        elif sealed[:1] == _LEGACY_VERSION:
            start = 1
            candidates = list(self._keys.values())
        else:
            raise ComputeError(ErrorCode.INVALID_STATE, f"secret {secret_id!r} is sealed in an unknown format")
        nonce, body = sealed[start : start + _NONCE_BYTES], sealed[start + _NONCE_BYTES :]
        for candidate in candidates:
            try:
                return candidate.decrypt(nonce, body, bound).decode()
            except InvalidTag:
                continue
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"secret {secret_id!r} does not open with this server's secrets (was the secret changed? "
            "pass the old one as a previous secret: BC_PREVIOUS_SECRETS)",
        )


def _bound(tenant_id: str, secret_id: str) -> bytes:
    return f"{tenant_id}/{secret_id}".encode()


def check_value(value: object, path: str) -> str:
    """The value, or INVALID_INPUT naming `path`: checked before anything is recorded of its request."""
    if not isinstance(value, str) or not value:
        raise ComputeError(ErrorCode.INVALID_INPUT, "a secret value is a non-empty string", path)
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"a secret value is at most {MAX_VALUE_BYTES} bytes", path)
    if is_reference(value):
        raise ComputeError(ErrorCode.INVALID_INPUT, "a secret value cannot itself be a secret reference", path)
    return value


async def create_secret(
    session: AsyncSession, sealer: Sealer, *, now: datetime, tenant_id: str, value: str, secret_id: str | None = None
) -> str:
    """Seal `value` for the tenant inside the caller's transaction; returns its reference.

    With `secret_id` (an Idempotency-Key's), a secret made under it already is answered as it is."""
    value = check_value(value, "/value")
    redact_value(value)
    if secret_id is not None:
        made = await session.get(SecretRow, secret_id)
        if made is not None and made.tenant_id == tenant_id:
            return reference_of(tenant_id, secret_id)
    secret_id = secret_id or new_id("sec")
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

    def __init__(self, db: Database, clock: Clock, secret: str, previous_secrets: Sequence[str] = ()) -> None:
        self.db = db
        self.clock = clock
        self.sealer = Sealer(secret, previous_secrets)

    async def create(self, tenant_id: str, value: str, *, secret_id: str | None = None) -> str:
        """Seal `value`; with `secret_id`, under that id, or answer the secret made under it already."""
        try:
            async with self.db.transaction() as session:
                return await create_secret(
                    session, self.sealer, now=self.clock.now(), tenant_id=tenant_id, value=value, secret_id=secret_id
                )
        except ComputeError:
            if secret_id is None:
                raise
            async with self.db.session() as session:  # another replica made it under this id meanwhile
                made = await session.get(SecretRow, secret_id)
            if made is None or made.tenant_id != tenant_id:
                raise
            return reference_of(tenant_id, secret_id)

    async def resolve(self, reference: str, *, tenant_id: str, path: str = "/reference") -> str:
        """Server code only: never expose this through an API."""
        async with self.db.read() as session:
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

    async def reseal(self, tenant_id: str | None = None) -> ResealReport:
        """Seal again, under the newest key, every value (of one tenant, or all) that is not under it yet.

        Idempotent, and safe beside a running server: each page is a transaction of its own, and a
        row is rewritten only if it still holds what was read (a secret deleted meanwhile stays
        deleted). A value that opens with none of the configured secrets is left as it is and named.
        """
        resealed = current = 0
        unreadable: list[str] = []
        after = ""
        while True:
            query = select(SecretRow.id, SecretRow.tenant_id, SecretRow.sealed).where(SecretRow.id > after)
            if tenant_id is not None:
                query = query.where(SecretRow.tenant_id == tenant_id)
            async with self.db.transaction() as session:
                rows = (await session.execute(query.order_by(SecretRow.id).limit(_RESEAL_PAGE))).all()
                for row in rows:
                    if self.sealer.is_current(row.sealed):
                        current += 1
                        continue
                    try:
                        value = self.sealer.open(row.tenant_id, row.id, row.sealed)
                    except ComputeError:
                        unreadable.append(reference_of(row.tenant_id, row.id))
                        continue
                    redact_value(value)
                    changed = await session.execute(
                        update(SecretRow)
                        .where(SecretRow.id == row.id, SecretRow.sealed == row.sealed)
                        .values(sealed=self.sealer.seal(row.tenant_id, row.id, value))
                    )
                    resealed += cast(CursorResult[Any], changed).rowcount
            if len(rows) < _RESEAL_PAGE:
                return ResealReport(self.sealer.key_id, resealed, current, tuple(unreadable))
            after = rows[-1].id

    @staticmethod
    def parse_reference(reference: str, *, path: str = "/reference") -> tuple[str, str]:
        return parse_reference(reference, path=path)

    @staticmethod
    def is_reference(value: object) -> bool:
        return is_reference(value)
