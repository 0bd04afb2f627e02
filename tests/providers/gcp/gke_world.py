"""The GKE world of the gcp tests: a GKE emulator on a simulated clock, backed by the Kubernetes API emulator, and the driver pointed at it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import Accelerators, ClusterCredentials
from better_compute.providers.gcp import GkeKubernetes, gcp_provider
from better_compute.testing import KubernetesSubject, PoolShape
from better_compute.testing.gke import GkeEmulator, SeedPool
from better_compute.testing.kube import KubeApiServer
from better_compute.vps.provider import ProviderAccount, ProviderImpl

PROJECT = "bc-test-project"
SERVICE_ACCOUNT = f"better-compute@{PROJECT}.iam.gserviceaccount.com"
"""The account's service account: its generateAccessToken tokens live 600 s at the cluster."""


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


def make_subject_factory(gke: Gke, provider: ProviderImpl | None = None) -> Callable[[], Awaitable[KubernetesSubject]]:
    """A fresh subject per case, each with a seeded cluster of someone else's to adopt."""

    async def accepts(credentials: ClusterCredentials) -> bool:
        if credentials.token not in gke.emulator.issued:
            return False
        client = kube_client(credentials)
        try:
            return bool([node async for node in client.list(Node)])
        except ApiError:
            return False
        finally:
            await client.close()

    async def factory() -> KubernetesSubject:
        adoptable = await gke.emulator.seed_cluster(
            f"theirs-{secrets.token_hex(3)}",
            project=PROJECT,
            location="us-central1",
            pools=(SeedPool("default-pool"), SeedPool("their-gpus", machine_type="g2-standard-4")),
        )
        return KubernetesSubject(
            provider=provider or gke.provider,
            config={"projectId": PROJECT, "serviceAccount": SERVICE_ACCOUNT},
            location="us-central1",
            node_pool=PoolShape("e2-standard-4", 1),
            gpu_node_pool=PoolShape("g2-standard-4", 1, Accelerators("nvidia-l4", 1)),
            accepts=accepts,
            upgrade_from="1.30",
            upgrade_to="1.31",
            adoptable=adoptable,
            absent_adoptable="us-central1/no-such-cluster",
            clock=gke.clock,
            advance=gke.advance,
        )

    return factory
