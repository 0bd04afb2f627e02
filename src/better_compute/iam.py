"""Tenants and API keys.

Every object in better-compute belongs to a tenant, and every HTTP call carries an
API key that names one. Keys are high-entropy random values shown once, when they
are made; the store keeps only their SHA-256. A key has the shape
`bck_<key id>_<secret>`, so `authenticate` finds the row by its id and then compares
hashes with `hmac.compare_digest`, in constant time, instead of searching by the
secret. The key value is registered with the redaction filter the moment it exists.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as _random
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ForeignKey, String, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.core.principal import Principal
from better_compute.core.redaction import redact_value
from better_compute.store import Base, Database, UTCDateTime

__all__ = ["ApiKey", "Iam", "Principal", "Tenant", "create_tenant", "require_tenant"]

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


class Iam:
    """Tenants and API keys, each call in a transaction of its own."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

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

    async def create_api_key(self, tenant_id: str) -> tuple[ApiKey, str]:
        """A new key for the tenant: its record, and the value, shown this once."""
        key_id = new_id("key")
        plain = f"{_KEY_PREFIX}{key_id.removeprefix('key_')}_{_random.token_urlsafe(32)}"
        redact_value(plain)
        async with self.db.transaction() as session:
            await require_tenant(session, tenant_id)
            row = ApiKeyRow(id=key_id, tenant_id=tenant_id, key_hash=_hash(plain), created_at=self.clock.now())
            session.add(row)
            await session.flush()
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
            return _api_key(row)

    async def authenticate(self, plain: str) -> Principal:
        """The principal a key stands for, or PERMISSION_DENIED (never saying why, or echoing the key)."""
        denied = ComputeError(ErrorCode.PERMISSION_DENIED, "invalid API key")
        match = _KEY_SHAPE.fullmatch(plain) if isinstance(plain, str) else None
        if match is None:
            raise denied
        async with self.db.session() as session:
            row = await session.get(ApiKeyRow, f"key_{match.group(1)}")
        if row is None:
            hmac.compare_digest(_hash(plain), _hash(""))  # same work whether or not the id exists
            raise denied
        if not hmac.compare_digest(row.key_hash, _hash(plain)) or row.revoked_at is not None:
            raise denied
        return Principal(tenant_id=row.tenant_id, key_id=row.id)
