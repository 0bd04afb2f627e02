"""Fixtures: an emulated API server on a SimClock, one cluster, an admin lightkube client."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import httpx2
import lightkube
import pytest

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeApiServer, KubeCluster


@pytest.fixture
async def kube(clock: SimClock) -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(clock) as server:
        yield server


@pytest.fixture
def cluster(kube: KubeApiServer) -> KubeCluster:
    return kube.add_cluster("c1")


def _credentials(cluster: KubeCluster, clock: SimClock, ttl: float = 600) -> ClusterCredentials:
    token = cluster.issue_token("admin", ttl_seconds=ttl)
    return ClusterCredentials(
        endpoint=cluster.endpoint,
        ca_data=cluster.ca_data,
        token=token,
        expires_at=clock.now() + timedelta(seconds=ttl),
    )


@pytest.fixture
def credentials_for(clock: SimClock) -> Callable[..., ClusterCredentials]:
    """`credentials_for(cluster, ttl=600)`: an admin credential minted by the cluster."""
    return lambda cluster, ttl=600: _credentials(cluster, clock, ttl)


@pytest.fixture
async def client(cluster: KubeCluster, clock: SimClock) -> AsyncIterator[lightkube.AsyncClient]:
    api = kube_client(_credentials(cluster, clock), timeout=10)
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
async def raw(
    cluster: KubeCluster, credentials_for: Callable[..., ClusterCredentials]
) -> AsyncIterator[httpx2.AsyncClient]:
    """Plain HTTPS to the cluster endpoint with an admin token, for what lightkube does not send."""
    context = ssl.create_default_context(cadata=base64.b64decode(cluster.ca_data).decode())
    token = credentials_for(cluster).token
    async with httpx2.AsyncClient(
        base_url=cluster.endpoint + "/", verify=context, headers={"Authorization": f"Bearer {token}"}, timeout=10
    ) as http:
        yield http
