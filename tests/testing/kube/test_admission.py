"""Pod admission in the emulator: PriorityClass, ResourceQuota scopes (GKE's limited critical
classes), Pod Security levels from namespace labels, and what a DaemonSet shows when its pods are refused."""

from __future__ import annotations

from typing import Any

import httpx2
import lightkube
import pytest
from lightkube import codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod

from better_compute.testing.gke.system import install_gke_system
from better_compute.testing.kube import KubeCluster

CRITICAL = (
    "insufficient quota to match these scopes: [{PriorityClass In [system-node-critical system-cluster-critical]}]"
)


def _pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    body = {"containers": [{"name": "c", "image": "busybox:1"}], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def _quota(name: str, hard: str, classes: list[str]) -> dict[str, Any]:
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": classes}]}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": {"pods": hard}, "scopeSelector": selector},
    }


async def _apply(client: lightkube.AsyncClient, obj: dict[str, Any], namespace: str | None = None) -> None:
    await client.apply(codecs.from_dict(obj), namespace=namespace, field_manager="t")


async def test_a_pod_with_an_unknown_priority_class_is_refused_and_a_known_one_gets_its_value(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    with pytest.raises(ApiError) as refused:
        await _apply(client, _pod(priorityClassName="gold"), "default")
    assert (refused.value.status.code, refused.value.status.message) == (
        403,
        'pods "p" is forbidden: no PriorityClass with name gold was found',
    )
    await _apply(client, _pod(priorityClassName="system-node-critical"), "default")
    assert cluster.get_object("Pod", "p", "default")["spec"]["priority"] == 2000001000  # type: ignore[index]


async def test_gke_refuses_critical_pods_outside_a_namespace_with_a_covering_quota(
    client: lightkube.AsyncClient, cluster: KubeCluster, raw: httpx2.AsyncClient
) -> None:
    install_gke_system(cluster)
    system_quota = cluster.get_object("ResourceQuota", "gcp-critical-pods", "kube-system")
    assert system_quota is not None and system_quota["status"] == {"hard": {"pods": "1G"}, "used": {"pods": "0"}}
    await _apply(client, _pod(priorityClassName="system-node-critical"), "kube-system")
    await _apply(client, _namespace("bc-system"))
    response = await raw.post("api/v1/namespaces/bc-system/pods", json=_pod(priorityClassName="system-node-critical"))
    assert (response.status_code, response.json()["message"]) == (500, CRITICAL)
    assert "reason" not in response.json() or response.json()["reason"] == ""
    await _apply(client, _pod("plain"), "bc-system")  # no critical class: not limited

    await _apply(client, _quota("bcd-critical-pods", "1", ["system-node-critical"]), "bc-system")
    await _apply(client, _pod(priorityClassName="system-node-critical"), "bc-system")
    quota = cluster.get_object("ResourceQuota", "bcd-critical-pods", "bc-system")
    assert quota is not None and quota["status"]["used"] == {"pods": "1"}
    with pytest.raises(ApiError) as full:
        await _apply(client, _pod("q", priorityClassName="system-node-critical"), "bc-system")
    assert full.value.status.message == (
        'pods "q" is forbidden: exceeded quota: bcd-critical-pods, requested: pods=1, used: pods=1, limited: pods=1'
    )
    response = await raw.post(
        "api/v1/namespaces/bc-system/pods", json=_pod("r", priorityClassName="system-cluster-critical")
    )
    assert (response.status_code, response.json()["message"]) == (500, CRITICAL)


async def test_a_cluster_without_limited_scopes_admits_critical_pods_anywhere(client: lightkube.AsyncClient) -> None:
    await _apply(client, _namespace("bc-system"))
    await _apply(client, _pod(priorityClassName="system-node-critical"), "bc-system")


HOSTY: dict[str, Any] = {
    "hostNetwork": True,
    "volumes": [{"name": "state", "hostPath": {"path": "/var/lib/x"}}, {"name": "dev", "hostPath": {"path": "/dev"}}],
    "containers": [
        {"name": "a", "image": "busybox:1", "securityContext": {"privileged": True}},
        {"name": "b", "image": "busybox:1"},
    ],
}


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({}, None),
        ({"pod-security.kubernetes.io/enforce": "privileged"}, None),
        (
            {"pod-security.kubernetes.io/enforce": "baseline"},
            'pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), '
            'hostPath volumes (volumes "state", "dev"), privileged (container "a" must not set '
            "securityContext.privileged=true)",
        ),
        (
            {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "v1.30"},
            'pods "p" is forbidden: violates PodSecurity "restricted:v1.30": host namespaces (hostNetwork=true), '
            'hostPath volumes (volumes "state", "dev"), privileged (container "a" must not set '
            'securityContext.privileged=true), allowPrivilegeEscalation != false (containers "a", "b" must set '
            'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (containers "a", "b" must '
            'set securityContext.capabilities.drop=["ALL"]), restricted volume types (volumes "state", "dev" use '
            'restricted volume type "hostPath"), runAsNonRoot != true (pod or containers "a", "b" must set '
            'securityContext.runAsNonRoot=true), seccompProfile (pod or containers "a", "b" must set '
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
        ),
    ],
)
async def test_pod_security_levels_from_namespace_labels(
    client: lightkube.AsyncClient, cluster: KubeCluster, labels: dict[str, str], message: str | None
) -> None:
    await _apply(client, _namespace("apps", labels))
    if message is None:
        await _apply(client, _pod(**HOSTY), "apps")
        return
    with pytest.raises(ApiError) as refused:
        await _apply(client, _pod(**HOSTY), "apps")
    assert (refused.value.status.code, refused.value.status.reason, refused.value.status.message) == (
        403,
        "Forbidden",
        message,
    )
    assert cluster.get_object("Pod", "p", "apps") is None


async def test_a_restricted_pod_passes_restricted(client: lightkube.AsyncClient) -> None:
    await _apply(client, _namespace("apps", {"pod-security.kubernetes.io/enforce": "restricted"}))
    context = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    pod = _pod(
        securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        containers=[{"name": "c", "image": "busybox:1", "securityContext": context}],
        volumes=[{"name": "cfg", "configMap": {"name": "x"}}],
    )
    await _apply(client, pod, "apps")


async def test_the_cluster_default_level_applies_to_unlabelled_namespaces_but_not_exempt_ones(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    cluster.admission.pod_security_default = "baseline"
    await _apply(client, _namespace("apps"))
    with pytest.raises(ApiError) as refused:
        await _apply(client, _pod(**HOSTY), "apps")
    assert 'violates PodSecurity "baseline:latest"' in refused.value.status.message
    await _apply(client, _pod(**HOSTY), "kube-system")
    await _apply(client, _namespace("privileged", {"pod-security.kubernetes.io/enforce": "privileged"}))
    await _apply(client, _pod(**HOSTY), "privileged")


async def test_a_daemonset_whose_pods_are_refused_shows_it_in_its_status_and_a_failed_create_event(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    install_gke_system(cluster)
    await cluster.kubelet.add_node("gpu-1")
    await cluster.kubelet.add_node("gpu-2")
    await _apply(client, _namespace("bc-system"))
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "bcd"},
        "spec": {
            "selector": {"matchLabels": {"app": "bcd"}},
            "template": {
                "metadata": {"labels": {"app": "bcd"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "containers": [{"name": "bcd", "image": "bcd:1"}],
                },
            },
        },
    }
    await _apply(client, ds, "bc-system")
    assert cluster.objects("Pod", "bc-system") == []
    status = (await client.get(DaemonSet, "bcd", namespace="bc-system")).status
    assert status is not None
    assert (status.desiredNumberScheduled, status.currentNumberScheduled, status.numberUnavailable) == (2, 0, 2)
    events = cluster.objects("Event", "bc-system")
    assert [
        (e["reason"], e["type"], e["involvedObject"]["kind"], e["source"]["component"], e["message"]) for e in events
    ] == [("FailedCreate", "Warning", "DaemonSet", "daemonset-controller", f"Error creating: {CRITICAL}")]
    assert events[0]["count"] >= 1

    await _apply(client, _quota("bcd-critical-pods", "1G", ["system-node-critical"]), "bc-system")
    pods = [p async for p in client.list(Pod, namespace="bc-system")]
    assert sorted(p.spec.nodeName for p in pods if p.spec) == ["gpu-1", "gpu-2"]


async def test_a_pod_mounting_one_path_twice_in_a_container_is_refused_and_stored_nowhere(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    volumes = [{"name": n, "hostPath": {"path": f"/{n}"}} for n in ("a", "b")]
    twice = [{"name": "a", "mountPath": "/dev/x"}, {"name": "b", "mountPath": "/dev/x"}]
    container = {"name": "c", "image": "busybox:1", "volumeMounts": twice}
    with pytest.raises(ApiError) as refused:
        await client.create(codecs.from_dict(_pod(containers=[container], volumes=volumes)), namespace="default")
    assert (refused.value.status.code, refused.value.status.message) == (
        422,
        'Pod "p" is invalid: spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/dev/x": must be unique',
    )
    with pytest.raises(ApiError):  # server-side apply is refused the same
        await _apply(client, _pod(containers=[container], volumes=volumes), "default")
    assert cluster.get_object("Pod", "p", "default") is None
    # One path in each of two containers is fine.
    apart = [{**container, "volumeMounts": twice[:1]}, {**container, "name": "d", "volumeMounts": twice[1:]}]
    await _apply(client, _pod(containers=apart, volumes=volumes), "default")
    assert cluster.get_object("Pod", "p", "default") is not None
