"""What a provider definition is: its name, the capabilities it implements, and their lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from better_compute.kubernetes.provider import ProviderKubernetes

__all__ = [
    "AccountConfig",
    "ProviderAccount",
    "ProviderImpl",
    "SecretRef",
    "SecretResolver",
    "SupportsClose",
    "secret_fields",
]

SecretResolver = Callable[[str], Awaitable[str]]
"""Resolves a `secret://<tenant>/<id>` reference of the account's own tenant to its value."""


async def _no_secrets(reference: str) -> str:
    from better_compute.core.errors import ComputeError, ErrorCode

    raise ComputeError(ErrorCode.INVALID_STATE, f"no secret resolver is configured for {reference}")


SECRET_MARK = "x-secret"

SecretRef = Annotated[
    str,
    Field(
        pattern=r"^secret://[^/\s]+/[^/\s]+$",
        max_length=256,
        json_schema_extra={SECRET_MARK: True},
        description="a secret://<tenant>/<id> reference, never the secret itself",
    ),
]
"""The one kind of field a secret may be given in: a reference, resolved per call."""


class AccountConfig(BaseModel):
    """A provider's account config, declared as a model: unknown keys are refused, types are
    checked without coercion, and a secret can only sit in a `SecretRef` field, so a token pasted
    anywhere else (`{"auth": {"token": ...}}`) is an unknown key, never stored."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, hide_input_in_errors=True)


def secret_fields(model: type[AccountConfig]) -> tuple[str, ...]:
    """The JSON keys of the model's `SecretRef` fields (those a reference of the tenant must fill)."""
    return tuple(
        info.alias or name
        for name, info in model.model_fields.items()
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get(SECRET_MARK)
    )


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
    account_config: type[AccountConfig] | None = None
    """The model of this provider's account `config`; without one, FleetConfig takes any object
    whose secret-looking keys, at any depth, hold references."""

    async def aclose(self) -> None:
        """Release what the capability drivers hold; call once on shutdown (again is harmless).
        A blocking `close()` runs in a worker thread, so the event loop keeps serving meanwhile."""
        driver: object = self.kubernetes  # close() is optional, not part of ProviderKubernetes
        if isinstance(driver, SupportsClose):
            await asyncio.to_thread(driver.close)
