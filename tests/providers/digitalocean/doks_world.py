"""The DOKS world a test gets: a SimClock, the Kubernetes API emulator, the DOKS emulator and the driver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.providers.digitalocean import DoksKubernetes
from better_compute.testing.doks import DoksEmulator
from better_compute.testing.kube import KubeApiServer
from better_compute.vps.provider import ProviderAccount, ProviderImpl

TENANT = "tenant_doks"
REFERENCE = f"secret://{TENANT}/sec_doks0001"
CANARY = "dop_v1_CANARY7f3e9d2c1b0a99887766554433221100ffeeddccbbaa"


@dataclass
class World:
    clock: SimClock
    kube: KubeApiServer
    doks: DoksEmulator
    provider: ProviderImpl
    resolved: list[str]

    @property
    def driver(self) -> DoksKubernetes:
        kubernetes = self.provider.kubernetes
        assert isinstance(kubernetes, DoksKubernetes)
        return kubernetes

    def account(self, **config: Any) -> ProviderAccount:
        async def resolve(reference: str) -> str:
            self.resolved.append(reference)
            if reference != REFERENCE:
                raise ComputeError(ErrorCode.NOT_FOUND, f"no secret {reference}")
            return CANARY

        base: dict[str, Any] = {"token": REFERENCE, "regions": ["tor1"]}
        return ProviderAccount("do-main", "digitalocean", TENANT, {**base, **config}, resolve_secret=resolve)

    async def advance(self, seconds: float) -> None:
        """Move the clock and let the emulated cloud catch up, as its own wake-ups would."""
        self.clock.advance(seconds)
        await self.doks.settle()
