"""A cluster's clients share one TLS context per CA, and it still refuses a server its CA did not sign."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx2
import pytest
from lightkube.resources.core_v1 import Node

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import credentials_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeApiServer, KubeCluster


@pytest.fixture
async def two(clock: SimClock) -> AsyncIterator[tuple[KubeCluster, KubeCluster]]:
    """A cluster on each of two API servers: two CAs, each made for this test."""
    async with KubeApiServer(clock) as first, KubeApiServer(clock) as second:
        yield first.add_cluster("c1"), second.add_cluster("c2")


def admin(cluster: KubeCluster, clock: SimClock, *, ca_of: KubeCluster | None = None) -> ClusterCredentials:
    return ClusterCredentials(
        endpoint=cluster.endpoint,
        ca_data=(ca_of or cluster).ca_data,
        token=cluster.issue_token("admin", ttl_seconds=600),
        expires_at=clock.now() + timedelta(seconds=600),
    )


async def nodes(credentials: ClusterCredentials) -> list[Node]:
    async with credentials_client(credentials) as client:
        return [node async for node in client.list(Node)]


async def test_clients_of_one_ca_share_a_context_and_another_ca_gets_its_own(
    two: tuple[KubeCluster, KubeCluster], clock: SimClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[dict[str, Any]] = []
    create = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(kwargs)
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    first, second = two
    for cluster in (first, first, first, second, second):
        assert await nodes(admin(cluster, clock)) == []
    assert len(built) == 2  # one context a CA, not one a client


async def test_a_server_the_ca_did_not_sign_is_refused(two: tuple[KubeCluster, KubeCluster], clock: SimClock) -> None:
    first, second = two
    assert await nodes(admin(second, clock)) == []  # the second CA's context is made and kept
    with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await nodes(admin(first, clock, ca_of=second))
    assert await nodes(admin(first, clock)) == []
