"""Leaving an adopted cluster is the kubernetes side's own work: on the one admin credential the driver
mints, bc-substrate is revoked and the claim given back, only where the claim names this pool. The
driver is asked for nothing but that credential (and, on a NOT_FOUND, whether the cluster is gone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.adopted_cluster import leave_adopted, reach_adopted, revoke_identity
from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE, take_claim
from better_compute.kubernetes.cluster_access.kube_api import credentials_client
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.kubernetes.provider import ClusterCredentials, ProviderKubernetes
from better_compute.testing.kube import KubeApiServer, KubeCluster
from better_compute.vps.provider import ProviderAccount

ACCOUNT = ProviderAccount("managed-k8s", "doks", "tenant_1", {})
POOL = "pool_leave0000000001"


class OnlyCredentials:
    """A driver that can mint an admin credential and say whether the cluster is there: nothing else."""

    def __init__(self, cluster: KubeCluster | None, clock: SimClock) -> None:
        self.cluster, self.clock = cluster, clock
        self.calls: list[str] = []

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        self.calls.append("credentials")
        if self.cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"cluster {cluster_id} not found")
        token = self.cluster.issue_token("provider-admin", ttl_seconds=600)
        return ClusterCredentials(
            self.cluster.endpoint, self.cluster.ca_data, token, self.clock.now() + timedelta(seconds=600)
        )

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> Any:
        self.calls.append("get_cluster")
        return self.cluster

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the kubernetes side asked the driver for {name}")


@pytest.fixture
async def cluster(clock: SimClock) -> AsyncIterator[KubeCluster]:
    async with KubeApiServer(clock) as server:
        yield server.add_cluster("adopted")


def as_driver(fake: OnlyCredentials) -> ProviderKubernetes:
    return cast(ProviderKubernetes, fake)


def identity_left(cluster: KubeCluster) -> list[bool]:
    return [
        cluster.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT) is not None,
        cluster.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None,
        cluster.get_object("Namespace", ACCESS_NAMESPACE) is not None,
    ]


async def test_leaving_revokes_bc_substrate_and_gives_back_the_claim_on_one_admin_credential(
    cluster: KubeCluster, clock: SimClock
) -> None:
    driver = OnlyCredentials(cluster, clock)
    await reach_adopted(as_driver(driver), ACCOUNT, "adopted", POOL, clock.now())
    assert identity_left(cluster) == [True, True, True]
    driver.calls.clear()

    await leave_adopted(as_driver(driver), ACCOUNT, "adopted", POOL)

    assert identity_left(cluster) == [False, False, False]
    assert cluster.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is None
    assert driver.calls == ["credentials"], "one admin credential, and no revoke asked of the driver"
    await leave_adopted(as_driver(driver), ACCOUNT, "adopted", POOL)  # again, after a crash: nothing left, fine


async def test_another_pools_claim_leaves_its_identity_and_claim_as_they_are(
    cluster: KubeCluster, clock: SimClock
) -> None:
    driver = OnlyCredentials(cluster, clock)
    await reach_adopted(as_driver(driver), ACCOUNT, "adopted", "pool_other0000000001", clock.now())

    await leave_adopted(as_driver(driver), ACCOUNT, "adopted", POOL)

    assert identity_left(cluster) == [True, True, True]
    assert cluster.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is not None


async def test_the_sweeps_revoke_takes_back_bc_substrate_and_leaves_the_claim(
    cluster: KubeCluster, clock: SimClock
) -> None:
    driver = OnlyCredentials(cluster, clock)
    await reach_adopted(as_driver(driver), ACCOUNT, "adopted", POOL, clock.now())
    async with credentials_client(await driver.credentials(ACCOUNT, "adopted")) as client:
        await take_claim(client, POOL)  # still ours

    await revoke_identity(as_driver(driver), ACCOUNT, "adopted")

    assert identity_left(cluster) == [False, False, False]
    assert cluster.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is not None


async def test_a_cluster_that_is_gone_has_nothing_left_to_take_back(clock: SimClock) -> None:
    driver = OnlyCredentials(None, clock)
    await leave_adopted(as_driver(driver), ACCOUNT, "gone", POOL)
    await revoke_identity(as_driver(driver), ACCOUNT, "gone")
    assert driver.calls == ["credentials", "get_cluster"] * 2
