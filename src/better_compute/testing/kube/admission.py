"""The admission a pod passes at creation, in the API server's order: Priority, PodSecurity, ResourceQuota.

Whoever creates the pod (a client, the DaemonSet controller) gets the same refusal, and
the refused pod is not stored. Priority resolves `priorityClassName` to `spec.priority`
(403 `no PriorityClass with name <n> was found`); PodSecurity is podsecurity.py; ResourceQuota
is quota.py. How the cluster's API server is configured is `Admission`'s fields: the Pod
Security default level and its exempt namespaces (the AdmissionConfiguration's
`defaults.enforce` and `exemptions.namespaces`), and the scopes whose consumption is limited
by default (GKE limits the critical priority classes: `GKE_CRITICAL_SCOPE`). Refusals name
the pod as the admission does before a name is generated: its `generateName` (`bcd-`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from better_compute.testing.kube.podsecurity import ENFORCE_LABEL, ENFORCE_VERSION_LABEL, LEVELS, violations
from better_compute.testing.kube.quota import check_pod_quota
from better_compute.testing.kube.resources import ResourceType, find_kind
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import ObjectStore

__all__ = ["CRITICAL_PRIORITY_CLASSES", "GKE_CRITICAL_SCOPE", "Admission"]

CRITICAL_PRIORITY_CLASSES = (
    (
        "system-node-critical",
        2000001000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2000000000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
)
"""The PriorityClasses every API server creates at start (kubernetes/kubernetes, pkg/apis/scheduling)."""
GKE_CRITICAL_SCOPE: dict[str, Any] = {
    "scopeName": "PriorityClass",
    "operator": "In",
    "values": ["system-node-critical", "system-cluster-critical"],
}
"""The scope GKE's API server limits by default; `kube-system/gcp-critical-pods` covers it there."""


def _kind(api_version: str, kind: str) -> ResourceType:
    found = find_kind(api_version, kind)
    assert found is not None
    return found


_PODS = _kind("v1", "Pod")
_NAMESPACES = _kind("v1", "Namespace")
_QUOTAS = _kind("v1", "ResourceQuota")
_PRIORITY_CLASSES = _kind("scheduling.k8s.io/v1", "PriorityClass")


@dataclass
class Admission:
    store: ObjectStore
    pod_security_default: str = "privileged"
    pod_security_exempt: tuple[str, ...] = ("kube-system",)
    limited_scopes: tuple[dict[str, Any], ...] = field(default=())

    def admit(self, rt: ResourceType, namespace: str, obj: dict[str, Any], name: str) -> None:
        """Admit `obj`, about to be stored, or raise the refusal (naming it `name`); a pod gets its `spec.priority`."""
        if rt is not _PODS:
            return
        spec = obj.setdefault("spec", {})
        self._priority(spec, name)
        self._pod_security(namespace, spec, name)
        check_pod_quota(self.store, _QUOTAS, _PODS, obj, self.limited_scopes, name)

    def _priority(self, spec: dict[str, Any], name: str) -> None:
        wanted = spec.get("priorityClassName")
        classes = self.store.items(_PRIORITY_CLASSES)
        if wanted:
            found = next((c for c in classes if c["metadata"]["name"] == wanted), None)
            if found is None:
                raise KubeError.forbidden(
                    f'pods "{name}" is forbidden: no PriorityClass with name {wanted} was found', _PODS, name
                )
        else:
            found = next((c for c in classes if c.get("globalDefault") is True), None)
            if found is not None:
                spec["priorityClassName"] = found["metadata"]["name"]
        spec["priority"] = int(found.get("value", 0)) if found is not None else 0
        if found is not None and found.get("preemptionPolicy"):
            spec.setdefault("preemptionPolicy", found["preemptionPolicy"])

    def _pod_security(self, namespace: str, spec: dict[str, Any], name: str) -> None:
        ns = self.store.peek(_NAMESPACES, "", namespace) or {"metadata": {}}
        labels = ns["metadata"].get("labels") or {}
        level = labels.get(ENFORCE_LABEL, self.pod_security_default)
        if level not in LEVELS:
            level = self.pod_security_default
        if namespace in self.pod_security_exempt:
            return
        found = violations(level, spec)
        if found:
            version = labels.get(ENFORCE_VERSION_LABEL, "latest")
            raise KubeError.forbidden(
                f'pods "{name}" is forbidden: violates PodSecurity "{level}:{version}": {", ".join(found)}',
                _PODS,
                name,
            )
