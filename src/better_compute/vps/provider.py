"""What a provider definition is: its name, the capabilities it implements, and their lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from better_compute.kubernetes.provider import ProviderKubernetes

__all__ = ["ProviderAccount", "ProviderImpl", "SecretResolver", "SupportsClose"]

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


@runtime_checkable
class SupportsClose(Protocol):
    """A capability driver that holds resources (a thread pool, SDK HTTP sessions) until closed.

    Optional: a driver without `close()` holds nothing to release. `close()` may block
    until in-flight SDK calls return, and a second call must be harmless, since one
    definition can be handed to several modules and to a test harness.
    """

    def close(self) -> None: ...


@dataclass(frozen=True)
class ProviderImpl:
    """A provider definition handed to `vps(providers=...)` and `kubernetes(providers=...)`."""

    name: str
    kubernetes: ProviderKubernetes | None = None

    async def aclose(self) -> None:
        """Release what the capability drivers hold; call once on shutdown (again is harmless).
        A blocking `close()` runs in a worker thread, so the event loop keeps serving meanwhile."""
        driver: object = self.kubernetes  # close() is optional, not part of ProviderKubernetes
        if isinstance(driver, SupportsClose):
            await asyncio.to_thread(driver.close)
