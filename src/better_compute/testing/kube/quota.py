"""ResourceQuota for pods: the quota admission and the quota controller's status.

A quota matches a pod when every one of its scopes (`spec.scopes`, `spec.scopeSelector`)
does: PriorityClass (In, NotIn, Exists, DoesNotExist on `priorityClassName`), Terminating
and NotTerminating (`activeDeadlineSeconds`), BestEffort and NotBestEffort. A pod a
matching quota has no room for is refused, 403 `exceeded quota: <name>, requested: pods=1,
used: pods=<n>, limited: pods=<hard>`. The API server can also be configured to limit
consumption by default (`limitedResources` in the ResourceQuota admission configuration,
as GKE does for the critical priority classes): a pod matching such a scope needs a quota
in its namespace whose scopes name it, or it is refused with the plain error the
admission returns, a 500 `insufficient quota to match these scopes: [{PriorityClass In
[system-node-critical system-cluster-critical]}]` (kubernetes/kubernetes,
plugin/pkg/admission/resourcequota/controller.go; kubernetes.io, Resource Quotas, "Limit
Priority Class consumption by default"). Only pods are counted (`pods`, `count/pods`);
other resources a quota names are kept but neither counted nor enforced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.status import KubeError

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster
    from better_compute.testing.kube.resources import ResourceType
    from better_compute.testing.kube.store import ObjectStore

__all__ = ["check_pod_quota", "scope_text", "sync_quota_status"]

MANAGER = "resourcequota-controller"
_COUNTED = ("pods", "count/pods")
_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")


def _quantity(value: Any) -> Decimal | None:
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        return None
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def scope_text(selector: dict[str, Any]) -> str:
    """A selector as Go's `%v` prints a ScopedResourceSelectorRequirement: `{PriorityClass In [a b]}`."""
    values = " ".join(str(v) for v in selector.get("values") or [])
    return f"{{{selector.get('scopeName', '')} {selector.get('operator', '')} [{values}]}}"


def _selectors(quota: dict[str, Any]) -> list[dict[str, Any]]:
    spec = quota.get("spec") or {}
    selectors = [{"scopeName": s, "operator": "Exists"} for s in spec.get("scopes") or []]
    return selectors + list((spec.get("scopeSelector") or {}).get("matchExpressions") or [])


def _best_effort(spec: dict[str, Any]) -> bool:
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    return not any((c.get("resources") or {}).get(k) for c in containers for k in ("requests", "limits"))


def _matches(selector: dict[str, Any], pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    scope, operator = selector.get("scopeName"), selector.get("operator")
    if scope == "PriorityClass":
        name = spec.get("priorityClassName") or ""
        values = selector.get("values") or []
        return {
            "In": bool(name) and name in values,
            "NotIn": bool(name) and name not in values,
            "Exists": bool(name),
            "DoesNotExist": not name,
        }.get(str(operator), False)
    terminating = spec.get("activeDeadlineSeconds") is not None
    return {
        "Terminating": terminating,
        "NotTerminating": not terminating,
        "BestEffort": _best_effort(spec),
        "NotBestEffort": not _best_effort(spec),
    }.get(str(scope), False)


def _quota_matches(quota: dict[str, Any], pod: dict[str, Any]) -> bool:
    return all(_matches(s, pod) for s in _selectors(quota))


def _counted(pod: dict[str, Any]) -> bool:
    """A pod quota counts: not finished, not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and "deletionTimestamp" not in pod["metadata"]


def _used(pods: Iterable[dict[str, Any]], quota: dict[str, Any]) -> int:
    return sum(1 for p in pods if _counted(p) and _quota_matches(quota, p))


def check_pod_quota(
    store: ObjectStore,
    quotas_rt: ResourceType,
    pods_rt: ResourceType,
    pod: dict[str, Any],
    limited: tuple[dict[str, Any], ...],
    name: str,
) -> None:
    """Refuse `pod` (being created in its namespace) as the quota admission would; `name` is how its refusal names it."""
    namespace = pod["metadata"]["namespace"]
    quotas = store.items(quotas_rt, namespace)
    covered = {s.get("scopeName") for q in quotas for s in _selectors(q) if _matches(s, pod)}
    uncovered = [s for s in limited if _matches(s, pod) and s.get("scopeName") not in covered]
    if uncovered:
        scopes = " ".join(scope_text(s) for s in uncovered)
        raise KubeError(500, "", f"insufficient quota to match these scopes: [{scopes}]")
    pods = store.items(pods_rt, namespace)
    for quota in quotas:
        if not _quota_matches(quota, pod):
            continue
        hard = (quota.get("spec") or {}).get("hard") or {}
        for resource in _COUNTED:
            limit = _quantity(hard[resource]) if resource in hard else None
            used = _used(pods, quota)
            if limit is not None and used + 1 > limit:
                raise KubeError.forbidden(
                    f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, requested: '
                    f"{resource}=1, used: {resource}={used}, limited: {resource}={hard[resource]}",
                    pods_rt,
                    name,
                )


def sync_quota_status(cluster: KubeCluster) -> None:
    """The quota controller: `status.hard` is the spec's, `status.used` counts the matching pods."""
    quotas_rt = cluster.resource("v1", "ResourceQuota")
    pods_rt = cluster.resource("v1", "Pod")
    for quota in list(cluster.store.items(quotas_rt)):
        meta = quota["metadata"]
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        pods = cluster.store.items(pods_rt, meta["namespace"])
        used = {r: str(_used(pods, quota)) for r in _COUNTED if r in hard}
        status = {"hard": hard, "used": used}
        if quota.get("status") != status:
            cluster.ops.update(
                quotas_rt,
                meta["namespace"],
                meta["name"],
                {**quota, "status": status},
                manager=MANAGER,
                subresource="status",
            )
