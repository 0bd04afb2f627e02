"""The conformance kit fails a deliberately broken driver on the named case, with a reason that says what broke.

Each broken driver is the GKE driver with one rule broken; the kit runs the case
that holds that rule and one it must still pass.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

from gke_world import Gke, make_subject_factory

from better_compute.core.conformance import Report, run_conformance
from better_compute.kubernetes.provider import (
    ClusterCredentials,
    ClusterSpec,
    ClusterState,
    NodePoolSpec,
    NodePoolState,
    Quota,
    QuotaNeed,
)
from better_compute.providers.gcp import GkeKubernetes
from better_compute.testing import kubernetes_provider_conformance_cases
from better_compute.vps.provider import ProviderAccount, ProviderImpl


class SecondClusterOnRetry(GkeKubernetes):
    """Makes a new cluster each time it is asked again, instead of finding the first one."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.calls: Counter[str] = Counter()

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        self.calls[spec.name] += 1
        if self.calls[spec.name] > 1:
            spec = replace(spec, name=f"{spec.name}-{self.calls[spec.name]}")
        return await super().ensure_cluster(account, spec)


class ReshapesInPlace(GkeKubernetes):
    """Takes a node pool of another shape by replacing the existing one under the same name."""

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        existing = await self.get_node_pool(account, cluster_id, spec.name)
        if existing is not None and existing.machine_type != spec.machine_type:
            await self.delete_node_pool(account, cluster_id, spec.name)
            return existing
        return await super().ensure_node_pool(account, cluster_id, spec)


class HourLongCredentials(GkeKubernetes):
    """Hands out credentials that claim to live an hour."""

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        credentials = await super().credentials(account, cluster_id)
        return replace(credentials, expires_at=credentials.expires_at + timedelta(seconds=3000))


class ListsWithoutMarks(GkeKubernetes):
    """Lists the project's clusters without reading better-compute's mark off them."""

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        return tuple(replace(c, substrate_pool=None) for c in await super().list_clusters(account))


async def run_broken(gke: Gke, driver: GkeKubernetes, names: set[str]) -> Report:
    cases = [case for case in kubernetes_provider_conformance_cases() if case.name in names]
    try:
        provider = ProviderImpl(name="gcp", kubernetes=driver)
        return await run_conformance(cases, make_subject_factory(gke, provider))
    finally:
        driver.close()


def broken(gke: Gke, kind: type[GkeKubernetes]) -> GkeKubernetes:
    return kind(endpoint=gke.emulator.url, credentials=gke.emulator.google_credentials(), clock=gke.clock)


async def test_a_driver_that_makes_a_second_cluster_on_retry_fails_the_idempotency_case(gke: Gke) -> None:
    report = await run_broken(
        gke, broken(gke, SecondClusterOnRetry), {"cluster-created-idempotently", "credentials-accepted"}
    )
    failed = report.result("cluster-created-idempotently")
    assert not failed.passed
    assert failed.reason is not None and "a retried ensure_cluster answered cluster" in failed.reason
    assert "never make a second one" in failed.reason
    assert report.result("credentials-accepted").passed


async def test_a_driver_that_changes_shape_in_place_fails_the_shape_case(gke: Gke) -> None:
    report = await run_broken(gke, broken(gke, ReshapesInPlace), {"node-pool-never-changes-shape", "delete-twice"})
    failed = report.result("node-pool-never-changes-shape")
    assert not failed.passed
    assert failed.reason == (
        "ensure_node_pool changing machine type e2-standard-4 -> g2-standard-4 was accepted; "
        "it must be refused with INVALID_STATE"
    )
    assert report.result("delete-twice").passed


async def test_a_driver_whose_credentials_outlive_600_s_fails_the_credentials_case(gke: Gke) -> None:
    report = await run_broken(gke, broken(gke, HourLongCredentials), {"credentials-accepted"})
    failed = report.result("credentials-accepted")
    assert not failed.passed
    assert failed.reason == "the credential is used for 3600 s; it must be 600 s at most, and near it"
    assert "FAIL credentials-accepted" in report.render()


async def test_a_driver_that_lists_clusters_without_their_mark_fails_the_listing_case(gke: Gke) -> None:
    report = await run_broken(gke, broken(gke, ListsWithoutMarks), {"clusters-listed-with-their-mark"})
    failed = report.result("clusters-listed-with-their-mark")
    assert not failed.passed
    assert failed.reason is not None and "marked None, not 'pool_" in failed.reason


class QuotaThatAddsNothing(GkeKubernetes):
    """Reads the region's quotas but says the machines add nothing to them."""

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        return tuple(replace(q, adds=0) for q in await super().quotas(account, place, needs))


async def test_a_driver_whose_quota_adds_nothing_fails_the_quota_case(gke: Gke) -> None:
    report = await run_broken(gke, broken(gke, QuotaThatAddsNothing), {"quotas-answered"})
    failed = report.result("quotas-answered")
    assert not failed.passed
    assert failed.reason is not None and "adds 0" in failed.reason and "machines that count against" in failed.reason
