"""Tenants and API keys.

Every object in better-compute belongs to a tenant, and every HTTP call carries an
API key that names one. Keys are high-entropy random values shown once, when they
are made; the store keeps only their SHA-256. A key has the shape
`bck_<key id>_<secret>`, so `authenticate` finds the row by its id and then compares
hashes with `hmac.compare_digest`, in constant time, instead of searching by the
secret. The key value is registered with the redaction filter the moment it exists.

A key verified once is then answered from memory (VerifiedKeys, by its SHA-256), so an
authenticated request costs no database round trip for its key; a revoke on any replica
empties every replica's cache before the key can be used again (NOTIFY on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import re
import secrets as _random
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ForeignKey, String, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.core.principal import Principal
from better_compute.core.redaction import redact_value
from better_compute.engine.notify import listen
from better_compute.store import Base, Database, UTCDateTime
from better_compute.store.sqlite_lock import SHARED_ENV

__all__ = [
    "REVOKED_CHANNEL",
    "ApiKey",
    "Iam",
    "Principal",
    "Tenant",
    "VerifiedKeys",
    "create_tenant",
    "new_api_key",
    "require_tenant",
]

_KEY_PREFIX = "bck_"
_KEY_SHAPE = re.compile(r"bck_([a-z2-7]{26})_([A-Za-z0-9_-]{43})")
_NAME_SHAPE = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")


class TenantRow(Base):
    __tablename__ = "iam_tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ApiKeyRow(Base):
    __tablename__ = "iam_api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ApiKey:
    """What is kept of a key: never its value."""

    id: str
    tenant_id: str
    created_at: datetime
    revoked_at: datetime | None


def _hash(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def new_api_key() -> tuple[str, str]:
    """A fresh key's id and value; nothing is stored until `Iam.create_api_key` makes it."""
    key_id = new_id("key")
    return key_id, f"{_KEY_PREFIX}{key_id.removeprefix('key_')}_{_random.token_urlsafe(32)}"


def _api_key(row: ApiKeyRow) -> ApiKey:
    return ApiKey(id=row.id, tenant_id=row.tenant_id, created_at=row.created_at, revoked_at=row.revoked_at)


async def require_tenant(session: AsyncSession, tenant_id: str, *, path: str = "/tenantId") -> Tenant:
    """The tenant, or NOT_FOUND naming the field that held its id."""
    row = await session.get(TenantRow, tenant_id) if isinstance(tenant_id, str) else None
    if row is None:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no tenant {tenant_id!r}", path)
    return Tenant(id=row.id, name=row.name)


async def create_tenant(session: AsyncSession, *, now: datetime, name: str) -> Tenant:
    """Make a tenant inside the caller's transaction; names are unique."""
    if not isinstance(name, str) or not _NAME_SHAPE.fullmatch(name):
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            "a tenant name is 1 to 63 lowercase letters, digits, '.', '_' or '-', starting and ending alphanumeric",
            "/name",
        )
    existing = await session.scalar(select(TenantRow.id).where(TenantRow.name == name))
    if existing is not None:
        raise ComputeError(ErrorCode.CONFLICT, f"a tenant named {name!r} exists already", "/name")
    row = TenantRow(id=new_id("ten"), name=name, created_at=now)
    session.add(row)
    await session.flush()
    return Tenant(id=row.id, name=row.name)


REVOKED_CHANNEL = "better_compute_api_key_revoked"
"""PostgreSQL: a revoke NOTIFYs here in its transaction; every replica's cache of verified keys empties."""
CACHE_SECONDS = 60.0
"""The longest a verified key is taken as valid without reading its row again."""
CACHE_SIZE = 10_000


class VerifiedKeys:
    """The API keys this process verified lately, by their SHA-256 (never the value), so that checking a
    key costs no database round trip.

    A revoke empties it on every replica before a request can use the revoked key again: on SQLite
    there is one process (store.sqlite_lock; no caching when BC_SQLITE_SHARED lets others in), whose
    own revoke empties it; on PostgreSQL the revoke NOTIFYs REVOKED_CHANNEL in its transaction and
    each replica LISTENs (`listen`), and nothing is cached while it does not listen. `generation`
    moves on each revoke seen and each lost listen: an entry is used only while the generation is the
    one it was read under, so a read racing a revoke is never kept."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.clock = clock
        self.generation = 0
        self._entries: dict[str, tuple[Principal, datetime, int]] = {}
        self._trusted = not db.is_postgres and os.environ.get(SHARED_ENV) != "1"
        self._listening = False

    @classmethod
    def of(cls, db: Database, clock: Clock) -> VerifiedKeys:
        """A cache of its own on PostgreSQL (its listener's); on SQLite the process's one for that file, so
        every Iam of the process on it sees each revoke."""
        if db.is_postgres:
            return cls(db, clock)
        return _SQLITE_CACHES.setdefault(db.url, cls(db, clock))

    def get(self, key_hash: str) -> Principal | None:
        entry = self._entries.get(key_hash)
        if entry is None or not (self._trusted or self._listening):
            return None
        principal, read_at, generation = entry
        if generation != self.generation or (self.clock.now() - read_at).total_seconds() >= CACHE_SECONDS:
            del self._entries[key_hash]
            return None
        return principal

    def put(self, key_hash: str, principal: Principal, generation: int) -> None:
        if generation != self.generation or not (self._trusted or self._listening):
            return
        if len(self._entries) >= CACHE_SIZE:
            self._entries.clear()
        self._entries[key_hash] = (principal, self.clock.now(), generation)

    def revoked(self, _payload: str = "") -> None:
        self.generation += 1
        self._entries.clear()

    def connected(self) -> None:
        self.revoked()
        self._listening = True

    def lost(self) -> None:
        self._listening = False
        self.revoked()


_SQLITE_CACHES: dict[str, VerifiedKeys] = {}


class Iam:
    """Tenants and API keys, each call in a transaction of its own; verified keys are cached (VerifiedKeys),
    on PostgreSQL while `start()`'s listener runs."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self.verified = VerifiedKeys.of(db, clock)
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """PostgreSQL: listen for revokes, so that verified keys may be cached."""
        if self.db.is_postgres and self._listener is None:
            v = self.verified
            self._listener = asyncio.create_task(
                listen(self.db, REVOKED_CHANNEL, v.revoked, connected=v.connected, lost=v.lost, sleep=self.clock.sleep),
                name="iam:revokes",
            )

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def create_tenant(self, name: str) -> Tenant:
        try:
            async with self.db.transaction() as session:
                return await create_tenant(session, now=self.clock.now(), name=name)
        except IntegrityError as exc:  # a concurrent create with the same name won the race
            raise ComputeError(ErrorCode.CONFLICT, f"a tenant named {name!r} exists already", "/name") from exc

    async def get_tenant(self, tenant_id: str) -> Tenant:
        async with self.db.session() as session:
            return await require_tenant(session, tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        async with self.db.session() as session:
            rows = await session.scalars(select(TenantRow).order_by(TenantRow.name))
            return [Tenant(id=r.id, name=r.name) for r in rows]

    async def require_tenant(self, session: AsyncSession, tenant_id: str) -> Tenant:
        return await require_tenant(session, tenant_id)

    async def create_api_key(self, tenant_id: str, *, made: tuple[str, str] | None = None) -> tuple[ApiKey, str]:
        """A new key for the tenant: its record, and the value, shown this once.

        `made` (an id and value from `new_api_key`, kept by an Idempotency-Key) makes that key, or
        answers it if it is made already: a retry of the create answers the first one's key."""
        key_id, plain = made or new_api_key()
        redact_value(plain)
        try:
            return await self._insert_api_key(tenant_id, key_id, plain)
        except IntegrityError:
            if made is None:
                raise
            return await self._insert_api_key(tenant_id, key_id, plain)  # another replica made it meanwhile

    async def _insert_api_key(self, tenant_id: str, key_id: str, plain: str) -> tuple[ApiKey, str]:
        async with self.db.transaction() as session:
            await require_tenant(session, tenant_id)
            row = await session.get(ApiKeyRow, key_id)
            if row is None:
                row = ApiKeyRow(id=key_id, tenant_id=tenant_id, key_hash=_hash(plain), created_at=self.clock.now())
                session.add(row)
                await session.flush()
            elif row.tenant_id != tenant_id or not hmac.compare_digest(row.key_hash, _hash(plain)):
                raise ComputeError(ErrorCode.CONFLICT, f"API key {key_id!r} exists already", "/keyId")
            return _api_key(row), plain

    async def list_api_keys(self, tenant_id: str) -> list[ApiKey]:
        async with self.db.session() as session:
            await require_tenant(session, tenant_id)
            rows = await session.scalars(
                select(ApiKeyRow).where(ApiKeyRow.tenant_id == tenant_id).order_by(ApiKeyRow.created_at)
            )
            return [_api_key(r) for r in rows]

    async def revoke_api_key(self, tenant_id: str, key_id: str) -> ApiKey:
        """Stop a key from authenticating; revoking twice is harmless."""
        async with self.db.transaction() as session:
            row = await session.get(ApiKeyRow, key_id)
            if row is None or row.tenant_id != tenant_id:
                raise ComputeError(ErrorCode.NOT_FOUND, f"no API key {key_id!r}", "/keyId")
            if row.revoked_at is None:
                row.revoked_at = self.clock.now()
            if self.db.is_postgres:  # delivered on commit, to every replica's VerifiedKeys
                await session.execute(
                    text("SELECT pg_notify(:channel, :key)"), {"channel": REVOKED_CHANNEL, "key": key_id}
                )
            revoked = _api_key(row)
        self.verified.revoked()
        return revoked

    async def authenticate(self, plain: str) -> Principal:
        """The principal a key stands for, or PERMISSION_DENIED (never saying why, or echoing the key)."""
        denied = ComputeError(ErrorCode.PERMISSION_DENIED, "invalid API key")
        match = _KEY_SHAPE.fullmatch(plain) if isinstance(plain, str) else None
        if match is None:
            raise denied
        key_hash = _hash(plain)
        cached = self.verified.get(key_hash)
        if cached is not None:
            return cached
        generation = self.verified.generation
        async with self.db.session() as session:
            row = await session.get(ApiKeyRow, f"key_{match.group(1)}")
        if row is None:
            hmac.compare_digest(key_hash, _hash(""))  # same work whether or not the id exists
            raise denied
        if not hmac.compare_digest(row.key_hash, key_hash) or row.revoked_at is not None:
            raise denied
        principal = Principal(tenant_id=row.tenant_id, key_id=row.id)
        self.verified.put(key_hash, principal, generation)
        return principal
