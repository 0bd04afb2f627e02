"""What a provider definition is: its name and the capabilities it implements."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from better_compute.kubernetes.provider import ProviderKubernetes

__all__ = ["ProviderAccount", "ProviderImpl", "SecretResolver"]

SecretResolver = Callable[[str], Awaitable[str]]
"""Resolves a `secret://<tenant>/<id>` reference of the account's own tenant to its value."""


async def _no_secrets(reference: str) -> str:
    from better_compute.core.errors import ComputeError, ErrorCode

    raise ComputeError(ErrorCode.INVALID_STATE, f"no secret resolver is configured for {reference}")


@dataclass(frozen=True)
class ProviderAccount:
    """One provider account of a tenant, as a FleetConfig `providerAccounts` entry names it.

    `config` holds the provider's own keys (projectId, region, eksSubnetIds, token, ...);
    secret values in it are `secret://` references that only `resolve_secret` turns
    into values, in memory, for one call.
    """

    name: str
    provider: str
    tenant_id: str
    config: Mapping[str, Any]
    resolve_secret: SecretResolver = field(default=_no_secrets, repr=False, compare=False)


@dataclass(frozen=True)
class ProviderImpl:
    """A provider definition handed to `vps(providers=...)` and `kubernetes(providers=...)`."""

    name: str
    kubernetes: ProviderKubernetes | None = None
