"""Events as the controllers' and the kubelet's event recorders write them.

A Warning or Normal Event about one object, from one component (and host, for the
kubelet). The same reason and message about the same object again is one Event whose
`count` and `lastTimestamp` move, as the recorder's aggregation does, so that a
controller retrying a refused create does not fill the namespace.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import timestamp

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["record_event"]


def record_event(
    cluster: KubeCluster,
    about: dict[str, Any],
    reason: str,
    message: str,
    *,
    component: str,
    host: str | None = None,
    type_: str = "Warning",
) -> None:
    """Record that `reason`/`message` happened to `about` (a stored object)."""
    rt = cluster.resource("v1", "Event")
    meta = about["metadata"]
    namespace = meta.get("namespace") or "default"
    now = timestamp(cluster.clock.now())
    for event in cluster.store.items(rt, namespace):
        involved = event.get("involvedObject") or {}
        if (involved.get("uid"), event.get("reason"), event.get("message")) == (meta["uid"], reason, message):
            if event.get("lastTimestamp") != now:
                bumped = {**event, "count": int(event.get("count", 1)) + 1, "lastTimestamp": now}
                with contextlib.suppress(KubeError):
                    cluster.ops.update(rt, namespace, event["metadata"]["name"], bumped, manager=component)
            return
    source: dict[str, str] = {"component": component}
    if host is not None:
        source["host"] = host
    event = {
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": about.get("apiVersion", "v1"),
            "kind": about.get("kind", ""),
            "name": meta["name"],
            "namespace": namespace,
            "uid": meta["uid"],
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": source,
        "reportingComponent": component,
        "reportingInstance": host or "",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    with contextlib.suppress(KubeError):
        cluster.ops.create(rt, namespace, event, manager=component)
