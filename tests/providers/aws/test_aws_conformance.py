"""The EKS driver passes the whole conformance kit against the EKS emulator."""

from __future__ import annotations

from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from better_compute.core.clock import SimClock
from better_compute.core.conformance import run_conformance
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import Accelerators, ClusterCredentials
from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)
from better_compute.testing.eks import EksEmulator
from better_compute.vps.provider import ProviderImpl


async def _endpoint_accepts(eks: EksEmulator, credentials: ClusterCredentials) -> bool:
    """A real request to the cluster's API server with the minted token (its authenticator records it)."""
    client = kube_client(credentials)
    try:
        [node async for node in client.list(Node)]
    except ApiError:
        return False
    finally:
        await client.close()
    return credentials.token in eks.issued


async def test_eks_driver_passes_the_whole_conformance_kit(
    eks: EksEmulator, provider: ProviderImpl, clock: SimClock, eks_config: dict[str, object]
) -> None:
    adoptable = await eks.seed_cluster("tenant-own", nodegroups={"workers": ("m7i.large", 1)})

    async def advance(seconds: float) -> None:
        clock.advance(seconds)
        await eks.settle()

    def subject() -> KubernetesSubject:
        return KubernetesSubject(
            provider=provider,
            config=eks_config,
            location="us-east-1",
            node_pool=PoolShape("m7i.large", 1),
            gpu_node_pool=PoolShape("g6.xlarge", 1, Accelerators("nvidia-l4", 1)),
            accepts=lambda credentials: _endpoint_accepts(eks, credentials),
            credential_lifetime_seconds=900,  # a presigned STS token: 15 minutes, by the EKS authenticator
            upgrade_from="1.30",
            upgrade_to="1.31",
            adoptable=adoptable,
            absent_adoptable="us-east-1/no-such-cluster",
            clock=clock,
            advance=advance,
            poll_seconds=120,
        )

    report = await run_conformance(kubernetes_provider_conformance_cases(), subject)
    assert report.passed, report.render()
    assert len(report.results) == len(kubernetes_provider_conformance_cases())
