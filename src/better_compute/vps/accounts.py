"""Provider accounts: a tenant's named account at a provider, and the config its driver reads.

The vps module owns them (table `vps_provider_accounts`, Alembic branch "vps").
Config keys are the provider's own (`projectId`, `eksSubnetIds`, `token`, ...).
A secret in a config is only ever a `secret://<tenant>/<id>` reference of the
account's own tenant (FleetConfig validation refuses anything else before it gets
here); its value is resolved in memory, for one call, by `ProviderAccount.resolve_secret`.
Session-level functions let FleetConfig apply write accounts in its own transaction;
the caller checks that the tenant exists (the foreign key holds it regardless).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import JSON, ForeignKey, String, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.store import Base, UTCDateTime

__all__ = [
    "AccountRecord",
    "ProviderAccountRow",
    "create_account",
    "delete_account",
    "get_account",
    "list_accounts",
    "update_account",
]

MAX_CONFIG_BYTES = 64 * 1024


class ProviderAccountRow(Base):
    __tablename__ = "vps_provider_accounts"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("iam_tenants.id"))
    name: Mapped[str] = mapped_column(String(63))
    provider: Mapped[str] = mapped_column(String(63))
    config: Mapped[dict[str, Any]] = mapped_column(JSON())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


@dataclass(frozen=True, slots=True)
class AccountRecord:
    id: str
    tenant_id: str
    name: str
    provider: str
    config: dict[str, Any]
    created_at: datetime
    updated_at: datetime


def _record(row: ProviderAccountRow) -> AccountRecord:
    return AccountRecord(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        provider=row.provider,
        config=dict(row.config),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _checked(config: object) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise ComputeError(ErrorCode.INVALID_INPUT, "an account config is a JSON object", "/config")
    try:
        encoded = json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise ComputeError(ErrorCode.INVALID_INPUT, "an account config holds only JSON values", "/config") from exc
    if len(encoded) > MAX_CONFIG_BYTES:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"an account config is at most {MAX_CONFIG_BYTES} bytes", "/config")
    return cast(dict[str, Any], json.loads(encoded))


async def list_accounts(session: AsyncSession, *, tenant_id: str) -> list[AccountRecord]:
    rows = await session.scalars(
        select(ProviderAccountRow).where(ProviderAccountRow.tenant_id == tenant_id).order_by(ProviderAccountRow.name)
    )
    return [_record(r) for r in rows]


async def get_account(session: AsyncSession, *, tenant_id: str, name: str) -> AccountRecord | None:
    row = await session.scalar(
        select(ProviderAccountRow).where(ProviderAccountRow.tenant_id == tenant_id, ProviderAccountRow.name == name)
    )
    return _record(row) if row is not None else None


async def create_account(
    session: AsyncSession, *, now: datetime, tenant_id: str, name: str, provider: str, config: dict[str, Any]
) -> AccountRecord:
    """A new account, inside the caller's transaction; names are unique per tenant."""
    checked = _checked(config)
    if await get_account(session, tenant_id=tenant_id, name=name) is not None:
        raise ComputeError(ErrorCode.CONFLICT, f"a provider account named {name!r} exists already", "/name")
    row = ProviderAccountRow(
        id=new_id("acct"),
        tenant_id=tenant_id,
        name=name,
        provider=provider,
        config=checked,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    await session.flush()
    return _record(row)


async def _row(session: AsyncSession, tenant_id: str, account_id: str) -> ProviderAccountRow:
    row = await session.get(ProviderAccountRow, account_id)
    if row is None or row.tenant_id != tenant_id:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no provider account {account_id!r}", "/accountId")
    return row


async def update_account(
    session: AsyncSession, *, now: datetime, tenant_id: str, account_id: str, config: dict[str, Any]
) -> AccountRecord:
    """Replace the config; an account never changes provider (that is another account)."""
    checked = _checked(config)
    row = await _row(session, tenant_id, account_id)
    if row.config != checked:
        row.config, row.updated_at = checked, now
        await session.flush()
    return _record(row)


async def delete_account(session: AsyncSession, *, tenant_id: str, account_id: str) -> None:
    await session.delete(await _row(session, tenant_id, account_id))
    await session.flush()
