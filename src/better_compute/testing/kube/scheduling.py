"""Whether a pod template may run on a Node: the DaemonSet controller's predicates.

`nodeSelector` labels, required node affinity (terms OR-ed, expressions within a
term AND-ed; In, NotIn, Exists, DoesNotExist, Gt, Lt; `matchFields` on
metadata.name) and taints (NoSchedule and NoExecute must be tolerated). The
tolerations a DaemonSet gets for free (not-ready, unreachable, unschedulable,
pressure) are added, so DaemonSet pods run on cordoned and NotReady nodes, as
on a real cluster.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DAEMONSET_TOLERATIONS", "fits"]

DAEMONSET_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


def _expression(expr: dict[str, Any], value: str | None) -> bool:
    operator = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _term(term: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    by_label = all(_expression(e, labels.get(e.get("key", ""))) for e in expressions)
    by_field = all(
        _expression(f, node["metadata"]["name"] if f.get("key") == "metadata.name" else None) for f in fields
    )
    return by_label and by_field


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def fits(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a DaemonSet pod with `pod_spec` belongs on `node`."""
    if "deletionTimestamp" in node["metadata"]:
        return False
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        (pod_spec.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required is not None and not any(_term(t, node) for t in required.get("nodeSelectorTerms") or []):
        return False
    tolerations = list(pod_spec.get("tolerations") or []) + list(DAEMONSET_TOLERATIONS)
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True
