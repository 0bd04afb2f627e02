"""Provider accounts: a tenant's named account at a provider, and the config its driver reads.

The vps module owns them (table `vps_provider_accounts`, Alembic branch "vps").
Config keys are the provider's own (`projectId`, `eksSubnetIds`, `token`, ...).
A secret in a config is only ever a `secret://<tenant>/<id>` reference of the
account's own tenant (FleetConfig validation refuses anything else before it gets
here); its value is resolved in memory, for one call, by `ProviderAccount.resolve_secret`.
Session-level functions let FleetConfig apply write accounts in its own transaction;
the caller checks that the tenant exists (the foreign key holds it regardless).

A hold (`vps_account_holds`) keeps an account while something still needs it after
no document names it: a substrate being torn down reaches its cluster through the
account, so deleting the account first would leak the cluster. FleetConfig apply
takes a hold per substrate teardown (`substrate:<pool id>`); the substrate reconciler
releases it once the substrate is deleted. `delete_account` refuses a held account.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import JSON, ForeignKey, String, delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.store import Base, UTCDateTime

__all__ = [
    "AccountHoldRow",
    "AccountRecord",
    "ProviderAccountRow",
    "account_holds",
    "create_account",
    "delete_account",
    "get_account",
    "hold_account",
    "list_accounts",
    "release_account_hold",
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


class AccountHoldRow(Base):
    __tablename__ = "vps_account_holds"

    account_id: Mapped[str] = mapped_column(ForeignKey("vps_provider_accounts.id"), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128), primary_key=True)
    since: Mapped[datetime] = mapped_column(UTCDateTime())


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
    """Delete an account that nothing holds; a held one is refused (INVALID_STATE)."""
    row = await _row(session, tenant_id, account_id)
    holders = await session.scalars(select(AccountHoldRow.holder).where(AccountHoldRow.account_id == account_id))
    held = sorted(holders)
    if held:
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"provider account {row.name!r} is still needed by {', '.join(held)}",
            "/accountId",
        )
    await session.delete(row)
    await session.flush()


async def hold_account(session: AsyncSession, *, now: datetime, tenant_id: str, account_id: str, holder: str) -> None:
    """Keep the account until `release_account_hold(holder)`; holding twice is one hold."""
    await _row(session, tenant_id, account_id)
    if await session.get(AccountHoldRow, (account_id, holder)) is None:
        session.add(AccountHoldRow(account_id=account_id, holder=holder, since=now))
        await session.flush()


async def release_account_hold(session: AsyncSession, *, holder: str) -> None:
    """Drop every hold `holder` has; releasing what is not held does nothing."""
    await session.execute(delete(AccountHoldRow).where(AccountHoldRow.holder == holder))


async def account_holds(session: AsyncSession, *, tenant_id: str) -> dict[str, tuple[str, ...]]:
    """The holders of each held account of the tenant, by account name."""
    rows = await session.execute(
        select(ProviderAccountRow.name, AccountHoldRow.holder)
        .join(AccountHoldRow, AccountHoldRow.account_id == ProviderAccountRow.id)
        .where(ProviderAccountRow.tenant_id == tenant_id)
        .order_by(ProviderAccountRow.name, AccountHoldRow.holder)
    )
    holds: dict[str, tuple[str, ...]] = {}
    for name, holder in rows:
        holds[name] = (*holds.get(name, ()), holder)
    return holds
