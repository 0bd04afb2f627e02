"""`GET pods/<name>/log`: what a container wrote, as the kubelet serves it to `kubectl logs`.

`container` picks the container (needed when the pod has more than one: the real 400
names the choices), `previous=true` the instance before its last restart, `tailLines`
the last lines, `timestamps=true` prefixes each with the time it was written. A
container that has not started answers the real 400 `... is waiting to start: <reason>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.status import KubeError

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["pod_log"]


def _names(spec: dict[str, Any], key: str) -> list[str]:
    return [str(c.get("name", "")) for c in spec.get(key) or []]


def _container(pod: dict[str, Any], wanted: str | None) -> str:
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    mains, inits = _names(spec, "containers"), _names(spec, "initContainers")
    if not wanted:
        if len(mains) == 1:
            return mains[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(mains)}]"
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        raise KubeError.bad_request(message)
    if wanted not in mains + inits:
        raise KubeError.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _waiting_reason(pod: dict[str, Any], container: str) -> str | None:
    status = pod.get("status") or {}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if entry.get("name") == container:
            state = entry.get("state") or {}
            if "waiting" in state and not entry.get("restartCount"):
                return str(state["waiting"].get("reason", "ContainerCreating"))
            return None
    return "ContainerCreating"


def pod_log(cluster: KubeCluster, namespace: str, name: str, query: Mapping[str, str]) -> str:
    pod = cluster.ops.get(cluster.resource("v1", "Pod"), namespace, name)
    container = _container(pod, query.get("container"))
    log = cluster.kubelet.logs.get((pod["metadata"]["uid"], container))
    previous = query.get("previous") in ("true", "1")
    if previous:
        lines = log.previous if log is not None else None
        if lines is None:
            raise KubeError.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    else:
        reason = _waiting_reason(pod, container) if log is None or not log.current else None
        if reason is not None:
            raise KubeError.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        lines = log.current if log is not None else []
    tail = query.get("tailLines")
    if tail is not None:
        try:
            count = int(tail)
        except ValueError as exc:
            raise KubeError.bad_request(f"tailLines: invalid value {tail!r}") from exc
        lines = lines[-count:] if count > 0 else []
    stamped = query.get("timestamps") in ("true", "1")
    return "".join(f"{at} {line}\n" if stamped else f"{line}\n" for at, line in lines)
