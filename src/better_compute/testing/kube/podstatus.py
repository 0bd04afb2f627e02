"""The pod statuses a kubelet writes, as pure functions of what happened.

Waiting (ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ContainerCreating), Running
with Ready conditions, readiness lost with the node, and a container's end:
Completed or Error, then the phase its restart policy implies (Succeeded,
Failed, or CrashLoopBackOff while Running).
"""

from __future__ import annotations

import uuid
from typing import Any

from better_compute.testing.kube.runtime import ContainerRun

__all__ = [
    "admission_failed",
    "condition",
    "container_status",
    "finished_status",
    "initializing_status",
    "restarted_status",
    "running_status",
    "waiting_status",
    "with_readiness",
]


def condition(kind: str, value: bool, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if value else "False", "lastProbeTime": None, "lastTransitionTime": now}


def container_status(container: ContainerRun, state: dict[str, Any], ready: bool) -> dict[str, Any]:
    return {
        "name": container.name,
        "image": container.image,
        "imageID": f"{container.image}@sha256:{uuid.uuid5(uuid.NAMESPACE_URL, container.image).hex * 2}",
        "containerID": f"containerd://{uuid.uuid4().hex}",
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
    }


def _kept_transitions(previous: dict[str, Any], conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`conditions`, each keeping its previous lastTransitionTime when its status did not change."""
    before = {c.get("type"): c for c in previous.get("conditions") or []}
    for entry in conditions:
        old = before.get(entry["type"])
        if old is not None and old.get("status") == entry["status"] and "lastTransitionTime" in old:
            entry["lastTransitionTime"] = old["lastTransitionTime"]
    return conditions


def waiting_status(pod: dict[str, Any], host_ip: str, reason: str, message: str, now: str) -> dict[str, Any]:
    """Pending with every container waiting for `reason`; a condition that keeps its value keeps its
    lastTransitionTime, so writing the same wait again changes nothing."""
    conditions = [condition("PodScheduled", True, now), condition("Ready", False, now)]
    return {
        "phase": "Pending",
        "hostIP": host_ip,
        "conditions": _kept_transitions(pod.get("status") or {}, conditions),
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
            for c in pod.get("spec", {}).get("containers") or []
        ],
    }


def running_status(
    host_ip: str, pod_ip: str, inits: list[ContainerRun], mains: list[ContainerRun], now: str
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": [condition(k, True, now) for k in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [container_status(c, {"running": {"startedAt": now}}, True) for c in mains],
    }
    if inits:
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        status["initContainerStatuses"] = [container_status(c, done, False) for c in inits]
    return status


def initializing_status(
    host_ip: str,
    pod_ip: str,
    inits: list[ContainerRun],
    mains: list[ContainerRun],
    current: int,
    now: str,
    *,
    restarts: int = 0,
) -> dict[str, Any]:
    """Pending while init container `current` runs (started `restarts` times before): earlier ones
    Completed, the rest waiting."""

    def init_state(index: int) -> dict[str, Any]:
        if index < current:
            return {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        if index == current:
            return {"running": {"startedAt": now}}
        return {"waiting": {"reason": "PodInitializing"}}

    return {
        "phase": "Pending",
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": [
            condition("Initialized", False, now),
            condition("Ready", False, now),
            condition("ContainersReady", False, now),
            condition("PodScheduled", True, now),
        ],
        "initContainerStatuses": [
            {
                **container_status(c, init_state(i), False),
                "started": i == current,
                "restartCount": restarts if i == current else 0,
            }
            for i, c in enumerate(inits)
        ],
        "containerStatuses": [container_status(c, {"waiting": {"reason": "PodInitializing"}}, False) for c in mains],
    }


def with_readiness(status: dict[str, Any], ready: bool, now: str) -> dict[str, Any] | None:
    """The status with Ready/ContainersReady set to `ready`, or None when nothing changes."""
    if status.get("phase") != "Running":
        return None
    want = "True" if ready else "False"
    conditions = status.get("conditions") or []
    if all(c.get("status") == want for c in conditions if c.get("type") in ("Ready", "ContainersReady")):
        return None
    changed = [
        condition(c["type"], ready, now) if c.get("type") in ("Ready", "ContainersReady") else c for c in conditions
    ]
    return {**status, "conditions": changed}


def admission_failed(reason: str, message: str, now: str) -> dict[str, Any]:
    """The kubelet refused to start the pod (its devices could not be given): Failed, never retried."""
    return {"phase": "Failed", "reason": reason, "message": message, "startTime": now}


def finished_status(pod: dict[str, Any], container: ContainerRun, error: Exception | None, now: str) -> dict[str, Any]:
    """The pod's status after one of its containers ended."""
    status = dict(pod.get("status") or {})
    terminated: dict[str, Any] = {
        "exitCode": 1 if error else 0,
        "reason": "Error" if error else "Completed",
        "startedAt": status.get("startTime", now),
        "finishedAt": now,
    }
    if error:
        terminated["message"] = str(error)
    key = "initContainerStatuses" if container.init else "containerStatuses"
    statuses = [dict(s) for s in status.get(key) or []]
    entry = next((s for s in statuses if s["name"] == container.name), None)
    if entry is None:
        entry = container_status(container, {}, False)
        statuses.append(entry)
    entry.update({"ready": False, "started": False, "state": {"terminated": terminated}})
    status[key] = statuses
    policy = pod.get("spec", {}).get("restartPolicy", "Always")
    mains = status.get("containerStatuses") or []
    if container.init and error and policy == "Never":
        status["phase"] = "Failed"
    elif error and policy != "Never":  # the kubelet starts it again after a back-off
        entry["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": str(error)}}
        entry["lastState"] = {"terminated": terminated}
        entry["restartCount"] = int(entry.get("restartCount", 0)) + 1
        if container.init:
            status["phase"] = "Pending"
    elif policy != "Always" and all("terminated" in s.get("state", {}) for s in mains):
        failed = any(s["state"]["terminated"]["exitCode"] != 0 for s in mains)
        status["phase"] = "Failed" if failed else "Succeeded"
    status["conditions"] = [
        condition(c["type"], False, now) if c.get("type") in ("Ready", "ContainersReady") else c
        for c in status.get("conditions") or []
    ]
    return status


def restarted_status(pod: dict[str, Any], container: ContainerRun, now: str) -> dict[str, Any]:
    """The pod's status once a failed container runs again after its back-off (its restartCount kept);
    the pod is Ready again when every container is."""
    status = dict(pod.get("status") or {})
    statuses = [dict(s) for s in status.get("containerStatuses") or []]
    for entry in statuses:
        if entry["name"] == container.name:
            entry.update({"ready": True, "started": True, "state": {"running": {"startedAt": now}}})
    status["containerStatuses"] = statuses
    ready = all(s.get("ready") for s in statuses)
    status["conditions"] = [
        condition(c["type"], ready, now)
        if c.get("type") in ("Ready", "ContainersReady") and c.get("status") != ("True" if ready else "False")
        else c
        for c in status.get("conditions") or []
    ]
    return status
