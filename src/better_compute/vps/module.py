"""`vps(providers=[...])`: the provider definitions, and each tenant's provider accounts.

    compute = better_compute(..., modules=[vps(providers=[gcp_provider(), aws_provider()]), ...])
    account = await compute.provider_accounts.get(tenant_id, "managed-k8s")   # a ProviderAccount

The module holds the definitions by name, for the modules that act on a provider
(kubernetes, fleet validation). Accounts are written by FleetConfig apply (fleet/);
`compute.provider_accounts` reads them and binds each one to the tenant's secrets,
so a driver resolves a `secret://` reference in memory, for one call, and never
sees another tenant's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.findings import Finding
from better_compute.store import Database
from better_compute.vps.accounts import AccountRecord, get_account, list_accounts
from better_compute.vps.provider import ProviderAccount, ProviderImpl, SecretResolver

if TYPE_CHECKING:
    from fastapi import APIRouter

    from better_compute.core.module import ComputeLike
    from better_compute.engine import Reconciler
    from better_compute.secrets import Secrets

__all__ = ["ProviderAccounts", "VpsModule", "vps"]


class ProviderAccounts:
    """`compute.provider_accounts`: a tenant's accounts, ready to hand to a driver."""

    def __init__(self, db: Database, clock: Clock, providers: Mapping[str, ProviderImpl], secrets: Secrets) -> None:
        self.db = db
        self.clock = clock
        self.providers = providers
        self._secrets = secrets

    def _bound(self, record: AccountRecord) -> ProviderAccount:
        secrets = self._secrets
        tenant_id = record.tenant_id

        async def resolve(reference: str) -> str:
            return await secrets.resolve(reference, tenant_id=tenant_id)

        resolver: SecretResolver = resolve
        return ProviderAccount(
            name=record.name,
            provider=record.provider,
            tenant_id=record.tenant_id,
            config=record.config,
            resolve_secret=resolver,
        )

    async def get(self, tenant_id: str, name: str) -> ProviderAccount:
        async with self.db.read() as session:
            record = await get_account(session, tenant_id=tenant_id, name=name)
        if record is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no provider account named {name!r}", "/account")
        return self._bound(record)

    async def list(self, tenant_id: str) -> list[ProviderAccount]:
        async with self.db.read() as session:
            records = await list_accounts(session, tenant_id=tenant_id)
        return [self._bound(r) for r in records]


class VpsModule:
    name = "vps"

    def __init__(self, providers: Sequence[ProviderImpl]) -> None:
        by_name: dict[str, ProviderImpl] = {}
        for provider in providers:
            if provider.name in by_name:
                raise ComputeError(
                    ErrorCode.INVALID_INPUT, f"provider {provider.name!r} is defined twice", "/providers"
                )
            by_name[provider.name] = provider
        self.providers: Mapping[str, ProviderImpl] = by_name

    def bind(self, compute: ComputeLike) -> None:
        compute.attach(
            "provider_accounts", ProviderAccounts(compute.db, compute.clock, self.providers, compute.secrets)
        )

    def reconcilers(self) -> list[Reconciler]:
        return []

    def routers(self) -> list[APIRouter]:
        return []

    def self_check(self) -> list[Finding]:
        if not self.providers:
            return [Finding("vps.no-providers", "warning", "vps() has no provider definitions: no account can be used")]
        return []

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        return []

    async def close(self) -> None:
        """Shut each provider's driver down (its thread pool) when the Compute closes."""
        for provider in self.providers.values():
            await provider.aclose()


def vps(*, providers: Sequence[ProviderImpl] = ()) -> VpsModule:
    """The vps module with these provider definitions (one per provider name)."""
    return VpsModule(providers)
