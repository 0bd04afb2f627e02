"""The Eviction subresource and PodDisruptionBudgets, through lightkube."""

from __future__ import annotations

from typing import Any

import lightkube
import pytest
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta
from lightkube.resources.core_v1 import Pod, PodEviction
from lightkube.resources.policy_v1 import PodDisruptionBudget

from better_compute.testing.kube import KubeCluster


async def _pods(cluster: KubeCluster, *names: str, ready: bool = True) -> None:
    """Pods labelled app=web; `ready` puts them on a Ready node (Running, Ready), else leaves them Pending."""
    if ready and cluster.get_object("Node", "n1") is None:
        await cluster.kubelet.add_node("n1")
    for name in names:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "web:1"}]}
        if ready:
            spec["nodeName"] = "n1"
        body = {"metadata": {"name": name, "labels": {"app": "web"}}, "spec": spec}
        cluster.ops.create(cluster.resource("v1", "Pod"), "default", body, manager="t")
    cluster.settle()


def _budget(name: str = "web", **spec: Any) -> PodDisruptionBudget:
    return PodDisruptionBudget.from_dict(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        }
    )


def _eviction(name: str) -> PodEviction:
    return PodEviction(metadata=ObjectMeta(name=name, namespace="default"))


@pytest.mark.parametrize(
    ("spec", "desired", "allowed"),
    [
        ({"minAvailable": 2}, 2, 1),
        ({"minAvailable": "50%"}, 2, 1),
        ({"maxUnavailable": 1}, 2, 1),
        ({"maxUnavailable": "10%"}, 2, 1),
        ({"minAvailable": 3}, 3, 0),
        ({"maxUnavailable": 0}, 3, 0),
    ],
)
async def test_the_disruption_controller_counts_healthy_pods(
    client: lightkube.AsyncClient, cluster: KubeCluster, spec: dict[str, Any], desired: int, allowed: int
) -> None:
    await _pods(cluster, "web-1", "web-2", "web-3")
    await client.create(_budget(**spec))
    status = (await client.get(PodDisruptionBudget, "web", namespace="default")).status
    assert (status.expectedPods, status.currentHealthy, status.desiredHealthy) == (3, 3, desired)
    assert status.disruptionsAllowed == allowed
    assert status.conditions[0].type == "DisruptionAllowed"
    assert status.conditions[0].status == ("True" if allowed else "False")


async def test_eviction_spends_the_budget_then_answers_429(client: lightkube.AsyncClient, cluster: KubeCluster) -> None:
    await _pods(cluster, "web-1", "web-2", "web-3")
    await client.create(_budget(minAvailable=2))
    await client.create(_eviction("web-1"), "web-1", namespace="default")
    assert [p["metadata"]["name"] for p in cluster.objects("Pod", "default")] == ["web-2", "web-3"]
    status = (await client.get(PodDisruptionBudget, "web", namespace="default")).status
    assert (status.currentHealthy, status.disruptionsAllowed) == (2, 0)
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(_eviction("web-2"), "web-2", namespace="default")
    refused = caught.value.status
    assert (refused.code, refused.reason) == (429, "TooManyRequests")
    assert refused.message == "Cannot evict pod as it would violate the pod's disruption budget."
    [cause] = refused.details.causes
    assert (cause.reason, cause.message) == (
        "DisruptionBudget",
        "The disruption budget web needs 2 healthy pods and has 2 currently",
    )
    assert len(cluster.objects("Pod", "default")) == 2


async def test_pods_without_a_budget_or_not_running_are_evicted(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await _pods(cluster, "pending", ready=False)
    await client.create(_budget(minAvailable=5))
    eviction = PodEviction(metadata=ObjectMeta(name="pending"), deleteOptions=DeleteOptions(gracePeriodSeconds=0))
    await client.create(eviction, "pending", namespace="default")
    assert cluster.objects("Pod", "default") == []
    await client.delete(PodDisruptionBudget, "web", namespace="default")
    await _pods(cluster, "web-1")
    await client.create(_eviction("web-1"), "web-1", namespace="default")
    assert cluster.objects("Pod", "default") == []


async def test_two_budgets_for_one_pod_are_a_500_and_a_missing_pod_a_404(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await _pods(cluster, "web-1")
    await client.create(_budget("a", minAvailable=0))
    await client.create(_budget("b", minAvailable=0))
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(_eviction("web-1"), "web-1", namespace="default")
    assert caught.value.status.code == 500
    assert "This pod has more than one PodDisruptionBudget" in caught.value.status.message
    with pytest.raises(lightkube.ApiError) as missing:
        await client.create(_eviction("nobody"), "nobody", namespace="default")
    assert (missing.value.status.code, missing.value.status.message) == (404, 'pods "nobody" not found')
    assert [p.metadata.name async for p in client.list(Pod, namespace="default")] == ["web-1"]
