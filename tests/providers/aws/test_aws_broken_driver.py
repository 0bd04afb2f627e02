"""The kit catches a broken EKS driver, naming the case and the reason."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from better_compute.core.clock import SimClock
from better_compute.core.conformance import run_conformance
from better_compute.kubernetes.provider import Accelerators, ClusterSpec, ClusterState, NodePoolSpec
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)
from better_compute.testing.eks import EksEmulator
from better_compute.vps.provider import ProviderAccount, ProviderImpl


class SecondClusterOnRetry(EksKubernetes):
    """Names each cluster afresh, so a retry makes a second one."""

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        return await super().ensure_cluster(account, replace(spec, name=f"{spec.name}-{secrets.token_hex(2)}"))


class ReshapesInPlace(EksKubernetes):
    """Never compares an existing node group's shape."""

    @staticmethod
    def _same_shape(group: Mapping[str, Any], spec: NodePoolSpec, ami: str, capacity: str, subnets: list[str]) -> None:
        return None


async def _run(eks: EksEmulator, clock: SimClock, driver: EksKubernetes, config: dict[str, object], case: str) -> str:
    async def advance(seconds: float) -> None:
        clock.advance(seconds)
        await eks.settle()

    def subject() -> KubernetesSubject:
        return KubernetesSubject(
            provider=ProviderImpl(name="aws", kubernetes=driver),
            config=config,
            location="us-east-1",
            node_pool=PoolShape("m7i.large", 1),
            gpu_node_pool=PoolShape("g6.xlarge", 1, Accelerators("nvidia-l4", 1)),
            accepts=eks.accepts,
            clock=clock,
            advance=advance,
            poll_seconds=120,
        )

    cases = [c for c in kubernetes_provider_conformance_cases() if c.name == case]
    report = await run_conformance(cases, subject)
    assert not report.passed
    [result] = report.results
    assert result.name == case
    assert result.reason is not None
    return result.reason


async def test_a_driver_that_makes_a_second_cluster_on_retry_fails_the_idempotency_case(
    eks: EksEmulator, driver: EksKubernetes, clock: SimClock, eks_config: dict[str, object]
) -> None:
    broken = SecondClusterOnRetry(driver._aws, clock)
    reason = await _run(eks, clock, broken, eks_config, "cluster-created-idempotently")
    assert "ensure_cluster named the cluster" in reason


async def test_a_driver_that_changes_shape_in_place_fails_the_shape_case(
    eks: EksEmulator, driver: EksKubernetes, clock: SimClock, eks_config: dict[str, object]
) -> None:
    broken = ReshapesInPlace(driver._aws, clock)
    reason = await _run(eks, clock, broken, eks_config, "node-pool-never-changes-shape")
    assert "was accepted; it must be refused with INVALID_STATE" in reason
