"""Defaults the real API server fills in on create, for the kinds that need them.

Only what clients and our own code read back: a Namespace's phase and name label,
a Pod's phase and restart policy, a Secret's type, a DaemonSet's update
strategy and an empty status.
"""

from __future__ import annotations

from typing import Any

from better_compute.testing.kube.resources import ResourceType

__all__ = ["apply_defaults"]


def apply_defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    if rt.kind == "Namespace":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif rt.kind == "Secret":
        obj.setdefault("type", "Opaque")
    elif rt.kind == "Pod":
        _pod_spec_defaults(obj.setdefault("spec", {}))
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif rt.kind == "DaemonSet":
        spec = obj.setdefault("spec", {})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
        )
        _pod_spec_defaults(spec.setdefault("template", {}).setdefault("spec", {}))
        obj["status"] = {
            "currentNumberScheduled": 0,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": 0,
            "numberReady": 0,
        }


def _pod_spec_defaults(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        if isinstance(container, dict):
            image = str(container.get("image", ""))
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
