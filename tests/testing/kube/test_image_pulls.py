"""The kubelet simulator's image pulls: a failed pull is tried again after the kubelet's image back-off."""

from __future__ import annotations

import asyncio
from typing import Any

from better_compute.core.clock import SimClock
from better_compute.testing.kube import KubeCluster

PULLED_AT = [0, 10, 30, 70, 150, 310, 610, 910]
"""Seconds after the first failed pull at which the kubelet pulls again: 10 s, doubling, at most 300 s."""


def _pod(cluster: KubeCluster, image: str = "missing:1") -> dict[str, Any]:
    body = {"metadata": {"name": "puller"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": image}]}}
    created = cluster.ops.create(cluster.resource("v1", "Pod"), "default", body, manager="test")
    cluster.settle()
    return created


def _waiting(cluster: KubeCluster) -> dict[str, Any]:
    pod = cluster.get_object("Pod", "puller", "default")
    assert pod is not None
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]
    return state.get("waiting") or {}


def _pulls(cluster: KubeCluster) -> int:
    """How many pulls have failed, from the kubelet's aggregated Event."""
    events = [e for e in cluster.objects("Event", "default") if e["message"].startswith("Failed to pull image")]
    return sum(int(e["count"]) for e in events)


async def _tick(clock: SimClock, seconds: int = 1) -> None:
    """Move the clock a second at a time, letting the kubelet's pod workers run at each."""
    for _ in range(seconds):
        clock.advance(1)
        for _ in range(3):
            await asyncio.sleep(0)


async def test_a_failed_pull_is_tried_again_at_the_kubelets_doubling_back_off_and_the_reasons_cycle(
    cluster: KubeCluster, clock: SimClock
) -> None:
    cluster.kubelet.image_pull_failures.add("missing:*")
    await cluster.kubelet.add_node("n1")
    _pod(cluster)
    pulled_at, reasons = [0], [(0, _waiting(cluster)["reason"])]
    for second in range(1, PULLED_AT[-1] + 1):
        before = _pulls(cluster)
        await _tick(clock)
        if _pulls(cluster) > before:
            pulled_at.append(second)
        reason = _waiting(cluster)["reason"]
        if reason != reasons[-1][1]:
            reasons.append((second, reason))
    assert pulled_at == PULLED_AT
    assert reasons[:5] == [
        (0, "ErrImagePull"),
        (20, "ImagePullBackOff"),
        (30, "ErrImagePull"),
        (40, "ImagePullBackOff"),
        (70, "ErrImagePull"),
    ]
    assert [second for second, reason in reasons if reason == "ErrImagePull"] == [0, *PULLED_AT[2:]]
    assert _waiting(cluster)["message"] == (
        'Failed to pull image "missing:1": failed to resolve reference "missing:1": not found'
    )
    await _tick(clock, 10)
    assert _waiting(cluster) == {
        "reason": "ImagePullBackOff",
        "message": 'Back-off pulling image "missing:1": Failed to pull image "missing:1": '
        'failed to resolve reference "missing:1": not found',
    }
    said = {(e["type"], e["reason"], e["message"]) for e in cluster.objects("Event", "default")}
    assert said >= {
        ("Warning", "Failed", "Error: ErrImagePull"),
        ("Normal", "BackOff", 'Back-off pulling image "missing:1"'),
        ("Warning", "Failed", "Error: ImagePullBackOff"),
    }


async def test_a_cleared_pull_fault_heals_at_the_next_retry_and_not_before(
    cluster: KubeCluster, clock: SimClock
) -> None:
    cluster.kubelet.image_pull_failures.add("missing:*")
    await cluster.kubelet.add_node("n1")
    uid = _pod(cluster)["metadata"]["uid"]
    await _tick(clock, 35)  # pulls failed at 0, 10 and 30: the next is at 70
    cluster.kubelet.image_pull_failures.clear()
    cluster.settle()
    await _tick(clock, 34)
    assert _waiting(cluster)["reason"] == "ImagePullBackOff"
    await _tick(clock)
    pod = cluster.get_object("Pod", "puller", "default")
    assert pod is not None and pod["metadata"]["uid"] == uid
    assert pod["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"


async def test_the_back_off_is_kept_per_image_so_a_pod_given_another_image_pulls_it_at_once(
    cluster: KubeCluster, clock: SimClock
) -> None:
    cluster.kubelet.image_pull_failures.add("missing:1")
    await cluster.kubelet.add_node("n1")
    _pod(cluster)
    await _tick(clock, 25)  # failed at 0 and 10: missing:1 is backed off until 30
    assert _waiting(cluster)["reason"] == "ImagePullBackOff"
    pod = cluster.get_object("Pod", "puller", "default") or {}
    pod["spec"]["containers"][0]["image"] = "present:1"
    cluster.ops.update(cluster.resource("v1", "Pod"), "default", "puller", pod, manager="test")
    cluster.settle()
    started = cluster.get_object("Pod", "puller", "default")
    assert started is not None and started["status"]["phase"] == "Running"
