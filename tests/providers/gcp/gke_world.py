"""The GKE world of the gcp tests: a GKE emulator on a simulated clock, backed by the Kubernetes API emulator, and the driver pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from better_compute.core.clock import SimClock
from better_compute.providers.gcp import GkeKubernetes, gcp_provider
from better_compute.testing.gke import GkeEmulator
from better_compute.testing.kube import KubeApiServer
from better_compute.vps.provider import ProviderAccount, ProviderImpl

PROJECT = "bc-test-project"


@dataclass
class Gke:
    clock: SimClock
    kube: KubeApiServer
    emulator: GkeEmulator
    provider: ProviderImpl
    driver: GkeKubernetes
    account: ProviderAccount
    advance: Callable[[float], Awaitable[None]]


def account(config: dict[str, object] | None = None, name: str = "gke") -> ProviderAccount:
    return ProviderAccount(name=name, provider="gcp", tenant_id="tenant_1", config=config or {"projectId": PROJECT})


@asynccontextmanager
async def gke_world() -> AsyncIterator[Gke]:
    clock = SimClock()
    async with KubeApiServer(clock) as kube, GkeEmulator(clock, kube) as emulator:
        provider = gcp_provider(endpoint=emulator.url, credentials=emulator.google_credentials(), clock=clock)
        driver = provider.kubernetes
        assert isinstance(driver, GkeKubernetes)

        async def advance(seconds: float) -> None:
            clock.advance(seconds)
            await emulator.settle()

        try:
            yield Gke(clock, kube, emulator, provider, driver, account(), advance)
        finally:
            driver.close()
