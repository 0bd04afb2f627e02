"""Fixtures for the EKS driver: a simulated clock, the Kubernetes API emulator, the
EKS emulator, and the driver pointed at it with the emulator's test identity."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from better_compute.core.clock import SimClock
from better_compute.providers.aws import AwsCredentials, EksKubernetes, aws_provider
from better_compute.testing.eks import EksEmulator
from better_compute.testing.kube import KubeApiServer
from better_compute.vps.provider import ProviderAccount, ProviderImpl

EKS_CONFIG = {
    "region": "us-east-1",
    "zones": ["us-east-1a", "us-east-1b"],
    "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
    "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
    "eksSubnetIds": ["subnet-0000000000000000a", "subnet-0000000000000000b"],
}


@pytest.fixture
async def kube(clock: SimClock) -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(clock) as server:
        yield server


@pytest.fixture
async def eks(clock: SimClock, kube: KubeApiServer) -> AsyncIterator[EksEmulator]:
    async with EksEmulator(clock, kube) as emulator:
        yield emulator


@pytest.fixture
def provider(eks: EksEmulator, clock: SimClock) -> Iterator[ProviderImpl]:
    impl = aws_provider(
        endpoint=eks.url,
        credentials=AwsCredentials(eks.access_key_id, eks.secret_access_key),
        max_workers=4,
        clock=clock,
    )
    yield impl
    assert isinstance(impl.kubernetes, EksKubernetes)
    impl.kubernetes.close()


@pytest.fixture
def driver(provider: ProviderImpl) -> EksKubernetes:
    assert isinstance(provider.kubernetes, EksKubernetes)
    return provider.kubernetes


@pytest.fixture
def eks_config() -> dict[str, object]:
    """The spec's EKS provider account config (a fresh copy per test)."""
    return {k: list(v) if isinstance(v, list) else v for k, v in EKS_CONFIG.items()}


@pytest.fixture
def account(eks_config: dict[str, object]) -> ProviderAccount:
    return ProviderAccount(name="managed-k8s", provider="aws", tenant_id="tenant_1", config=eks_config)
