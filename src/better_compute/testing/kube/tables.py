"""`Accept: application/json;as=Table` answers, which `kubectl get` prints.

Columns follow the real server for the kinds kubectl users look at (Nodes, Pods,
DaemonSets, Events: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE); every other kind gets
Name and Age, like a CRD without printer columns.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from better_compute.testing.kube.resources import ResourceType

__all__ = ["render_table"]

_WIDE = frozenset({"IP", "Node"})


def _age(obj: dict[str, Any], now: datetime) -> str:
    return _since(obj["metadata"].get("creationTimestamp"), now)


def _since(created: str | None, now: datetime) -> str:
    if not created:
        return "<unknown>"
    seconds = max(0, int((now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _node_cells(obj: dict[str, Any]) -> list[Any]:
    conditions = {c.get("type"): c.get("status") for c in obj.get("status", {}).get("conditions", [])}
    status = "Ready" if conditions.get("Ready") == "True" else "NotReady"
    if obj.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    version = obj.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")
    return [status, ",".join(roles) or "<none>", version]


def _init_reason(inits: list[dict[str, Any]]) -> str | None:
    """kubectl's STATUS while an init container has not completed (Init:CrashLoopBackOff, Init:1/2), else None."""
    for index, entry in enumerate(inits):
        state = entry.get("state", {})
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and terminated.get("exitCode") == 0:
            continue
        if terminated is not None:
            return f"Init:{terminated.get('reason') or 'ExitCode:' + str(terminated.get('exitCode'))}"
        if waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return f"Init:{waiting['reason']}"
        return f"Init:{index}/{len(inits)}"
    return None


def _pod_cells(obj: dict[str, Any]) -> list[Any]:
    statuses = obj.get("status", {}).get("containerStatuses") or []
    total = len(obj.get("spec", {}).get("containers", []))
    ready = sum(1 for s in statuses if s.get("ready"))
    reason = obj.get("status", {}).get("phase", "")
    inits = obj.get("status", {}).get("initContainerStatuses") or []
    restarts = sum(int(s.get("restartCount", 0)) for s in inits + statuses)
    initializing = _init_reason(inits)
    if initializing is not None:
        reason = initializing
    for container in statuses if initializing is None else ():
        waiting = container.get("state", {}).get("waiting")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
    ip = obj.get("status", {}).get("podIP") or "<none>"
    return [f"{ready}/{total}", reason, restarts, ip, obj.get("spec", {}).get("nodeName") or "<none>"]


def _daemonset_cells(obj: dict[str, Any]) -> list[Any]:
    status = obj.get("status", {})
    selector = obj.get("spec", {}).get("template", {}).get("spec", {}).get("nodeSelector") or {}
    return [
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        ",".join(f"{k}={v}" for k, v in selector.items()) or "<none>",
    ]


def _budget_cells(obj: dict[str, Any]) -> list[Any]:
    spec = obj.get("spec", {})
    return [
        str(spec.get("minAvailable", "N/A")),
        str(spec.get("maxUnavailable", "N/A")),
        obj.get("status", {}).get("disruptionsAllowed", 0),
    ]


_COLUMNS: dict[str, tuple[list[tuple[str, str]], Callable[[dict[str, Any]], list[Any]]]] = {
    "Node": ([("Status", "string"), ("Roles", "string"), ("Age", "string"), ("Version", "string")], _node_cells),
    "Pod": (
        [
            ("Ready", "string"),
            ("Status", "string"),
            ("Restarts", "integer"),
            ("Age", "string"),
            ("IP", "string"),
            ("Node", "string"),
        ],
        _pod_cells,
    ),
    "DaemonSet": (
        [
            ("Desired", "integer"),
            ("Current", "integer"),
            ("Ready", "integer"),
            ("Up-to-date", "integer"),
            ("Available", "integer"),
            ("Node Selector", "string"),
            ("Age", "string"),
        ],
        _daemonset_cells,
    ),
    "PodDisruptionBudget": (
        [
            ("Min Available", "string"),
            ("Max Unavailable", "string"),
            ("Allowed Disruptions", "integer"),
            ("Age", "string"),
        ],
        _budget_cells,
    ),
}


_EVENT_COLUMNS = (
    ("Last Seen", 0),
    ("Type", 0),
    ("Reason", 0),
    ("Object", 0),
    ("Subobject", 1),
    ("Source", 1),
    ("Message", 0),
    ("First Seen", 1),
    ("Count", 1),
    ("Name", 1),
)


def _event_cells(obj: dict[str, Any], now: datetime) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    source = obj.get("source") or {}
    return [
        _since(obj.get("lastTimestamp") or obj["metadata"].get("creationTimestamp"), now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        ", ".join(str(v) for v in (source.get("component"), source.get("host")) if v),
        obj.get("message", ""),
        _since(obj.get("firstTimestamp") or obj["metadata"].get("creationTimestamp"), now),
        int(obj.get("count", 1)),
        obj["metadata"]["name"],
    ]


def _table(columns: list[dict[str, Any]], rows: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"},
    }


def render_table(
    rt: ResourceType, objects: list[dict[str, Any]], now: datetime, resource_version: str
) -> dict[str, Any]:
    if rt.kind == "Event":
        columns = [
            {"name": n, "type": "integer" if n == "Count" else "string", "format": "", "description": n, "priority": p}
            for n, p in _EVENT_COLUMNS
        ]
        rows = [{"cells": _event_cells(obj, now), "object": _partial(obj)} for obj in objects]
        return _table(columns, rows, resource_version)
    extra, cells = _COLUMNS.get(rt.kind, ([("Age", "string")], lambda _obj: []))
    columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    columns += [
        {"name": n, "type": t, "format": "", "description": n, "priority": 1 if n in _WIDE else 0} for n, t in extra
    ]

    def row(obj: dict[str, Any]) -> list[Any]:
        values = iter(cells(obj))
        return [obj["metadata"]["name"]] + [_age(obj, now) if n == "Age" else next(values) for n, _ in extra]

    rows = [{"cells": row(obj), "object": _partial(obj)} for obj in objects]
    return _table(columns, rows, resource_version)
