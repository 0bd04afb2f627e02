"""The integration surface the provider emulators build on: clusters, tokens, kubelet nodes."""

from __future__ import annotations

import base64
from collections.abc import Callable

import lightkube
import pytest
from lightkube.resources.core_v1 import Node

from better_compute.core.redaction import redact
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeApiServer, KubeCluster


async def test_nodes_added_by_the_kubelet_are_listed_through_lightkube(
    cluster: KubeCluster, client: lightkube.AsyncClient
) -> None:
    await cluster.kubelet.add_node("n1", labels={"pool": "gpu"}, capacity={"nvidia.com/gpu": "8"})
    await cluster.kubelet.add_node("n2", labels={"pool": "cpu"})
    names = sorted([n.metadata.name async for n in client.list(Node)])
    assert names == ["n1", "n2"] == cluster.kubelet.node_names
    node = await client.get(Node, "n1")
    assert node.metadata.labels["pool"] == "gpu"
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready[0].status == "True"


async def test_removed_node_is_gone_and_not_ready_node_reports_unknown(
    cluster: KubeCluster, client: lightkube.AsyncClient
) -> None:
    await cluster.kubelet.add_node("n1")
    await cluster.kubelet.add_node("n2")
    await cluster.kubelet.set_ready("n2", False)
    await cluster.kubelet.remove_node("n1")
    names = [n.metadata.name async for n in client.list(Node)]
    assert names == ["n2"]
    node = await client.get(Node, "n2")
    assert [c.status for c in node.status.conditions if c.type == "Ready"] == ["Unknown"]


async def test_clusters_live_under_their_own_path_prefix(
    kube: KubeApiServer, credentials_for: Callable[..., ClusterCredentials]
) -> None:
    first = kube.add_cluster("a")
    second = kube.add_cluster("b", version="1.29.4")
    await first.kubelet.add_node("only-in-a")
    assert first.endpoint == f"{kube.url}/clusters/a"
    assert base64.b64decode(first.ca_data).startswith(b"-----BEGIN CERTIFICATE-----")
    api = kube_client(credentials_for(second))
    try:
        assert [n async for n in api.list(Node)] == []
    finally:
        await api.close()
    kube.remove_cluster("b")
    with pytest.raises(KeyError):
        kube.cluster("b")
    assert kube.cluster("a") is first


async def test_kube_client_redacts_its_token_and_has_a_timeout(
    cluster: KubeCluster, credentials_for: Callable[..., ClusterCredentials]
) -> None:
    credentials = credentials_for(cluster)
    api = kube_client(credentials, timeout=7)
    try:
        assert credentials.token not in redact(f"Authorization: Bearer {credentials.token}")
        assert api._client._client.timeout.read == 7
        assert [n async for n in api.list(Node)] == []
    finally:
        await api.close()


async def test_removed_clusters_close_their_kubelet(kube: KubeApiServer) -> None:
    doomed = kube.add_cluster("doomed")
    await doomed.kubelet.add_node("n1")
    directory = (await doomed.kubelet.device_plugin_socket("n1")).parent
    kube.remove_cluster("doomed")
    await kube.stop()
    assert not directory.exists()
