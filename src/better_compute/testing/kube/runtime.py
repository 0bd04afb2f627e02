"""What a simulated container sees: its env and its mounted files.

The kubelet resolves a container's environment (plain values, the downward API
such as `NODE_NAME` from `spec.nodeName`, Secret and ConfigMap keys, `envFrom`)
and its volumes (Secret, ConfigMap, projected sources, the service-account
token) into a `PodRun`, which the pod runtime hook receives. A missing Secret or
ConfigMap that is not optional stops the container from being created, with the
reason the real kubelet reports.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.gpus import NodeGpus
from better_compute.testing.kube.tokens import mint_account_token

if TYPE_CHECKING:
    from better_compute.bcd.simnvml import SimulatedNvml
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = [
    "ContainerLog",
    "ContainerRun",
    "NodeRun",
    "PodRun",
    "PodRuntime",
    "UnresolvedReference",
    "resolve_container",
]


class UnresolvedReference(Exception):
    """A Secret/ConfigMap the container needs is missing; `reason` is the kubelet's."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ContainerRun:
    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]
    files: dict[str, bytes]
    init: bool


@dataclass(frozen=True)
class NodeRun:
    """The Node a pod runs on, as its runtime sees it. `device_plugin_dir` holds the
    kubelet's Registration socket (`kubelet.sock`, already served) for device plugins;
    `host_root` is the machine's own filesystem, where hostPath volumes point; `gpus` its GPUs (the
    same object the kubelet keeps, so a driver loaded later shows); `nvml` the machine's simulated NVML."""

    name: str
    labels: dict[str, str]
    capacity: dict[str, str]
    device_plugin_dir: Path
    host_root: Path
    gpus: NodeGpus | None = None
    nvml: SimulatedNvml | None = None


def _no_time() -> str:
    return ""


@dataclass
class ContainerLog:
    """What a container wrote (its stdout and stderr, as the kubelet keeps them): each line with
    the time the kubelet took it (`now`), the current instance's and the one before a restart."""

    now: Callable[[], str] = _no_time
    current: list[tuple[str, str]] = field(default_factory=list)
    previous: list[tuple[str, str]] | None = None

    def write(self, line: str) -> None:
        self.current.append((self.now(), line))

    def restarted(self) -> None:
        self.previous, self.current = self.current, []


@dataclass(frozen=True)
class PodRun:
    """One container of one pod, handed to the pod runtime hook. `gpus` are the UUIDs of the
    GPUs the node's container runtime gave the container (testing/kube/gpus.py); what the
    container writes goes to `log` (`kubectl logs`)."""

    name: str
    namespace: str
    uid: str
    node_name: str
    container: ContainerRun
    manifest: dict[str, Any] = field(repr=False)
    gpus: tuple[str, ...] = ()
    log: ContainerLog = field(default_factory=ContainerLog, repr=False)


PodRuntime = Callable[[PodRun, NodeRun], Awaitable[None]]


def _decode(data: dict[str, str] | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (data or {}).items()}


def _secret(cluster: KubeCluster, namespace: str, name: str) -> dict[str, bytes] | None:
    obj = cluster.store.peek(cluster.resource("v1", "Secret"), namespace, name)
    return _decode(obj.get("data")) if obj is not None else None


def _config_map(cluster: KubeCluster, namespace: str, name: str) -> dict[str, bytes] | None:
    obj = cluster.store.peek(cluster.resource("v1", "ConfigMap"), namespace, name)
    if obj is None:
        return None
    values = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    values.update(_decode(obj.get("binaryData")))
    return values


def _field_ref(pod: dict[str, Any], path: str) -> str:
    meta = pod["metadata"]
    simple = {
        "spec.nodeName": pod.get("spec", {}).get("nodeName", ""),
        "metadata.name": meta["name"],
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName", "default"),
        "status.podIP": pod.get("status", {}).get("podIP", ""),
        "status.hostIP": pod.get("status", {}).get("hostIP", ""),
    }
    if path in simple:
        return str(simple[path])
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    return ""


def _lookup(
    cluster: KubeCluster, namespace: str, kind: str, ref: dict[str, Any], key: str | None
) -> dict[str, bytes] | None:
    reader = _secret if kind == "Secret" else _config_map
    values = reader(cluster, namespace, ref.get("name", ""))
    optional = bool(ref.get("optional"))
    if values is None or (key is not None and key not in values):
        if optional:
            return None
        what = (
            f'{kind.lower()} "{ref.get("name", "")}" not found'
            if values is None
            else f"couldn't find key {key} in {kind} {namespace}/{ref.get('name')}"
        )
        raise UnresolvedReference("CreateContainerConfigError", what)
    return values


def _env(cluster: KubeCluster, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    namespace = pod["metadata"].get("namespace", "")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, ref_name in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if ref_name in source:
                values = _lookup(cluster, namespace, kind, source[ref_name], None)
                env.update({prefix + k: v.decode() for k, v in (values or {}).items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = str(var["value"])
            continue
        value_from = var.get("valueFrom") or {}
        if "fieldRef" in value_from:
            env[name] = _field_ref(pod, value_from["fieldRef"].get("fieldPath", ""))
        for kind, ref_name in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            if ref_name in value_from:
                ref = value_from[ref_name]
                values = _lookup(cluster, namespace, kind, ref, ref.get("key"))
                if values is not None:
                    env[name] = values[ref["key"]].decode()
        if name not in env and not value_from:
            env[name] = ""
    return env


def _items(values: dict[str, bytes], items: list[dict[str, Any]] | None) -> dict[str, bytes]:
    if not items:
        return dict(values)
    return {item["path"]: values[item["key"]] for item in items if item.get("key") in values}


def _volume_files(cluster: KubeCluster, pod: dict[str, Any], volume: dict[str, Any]) -> dict[str, bytes] | None:
    namespace = pod["metadata"].get("namespace", "")
    if "secret" in volume:
        source = volume["secret"]
        ref = {"name": source.get("secretName", ""), "optional": source.get("optional")}
        values = _lookup_volume(cluster, namespace, "Secret", ref)
        return _items(values, source.get("items")) if values is not None else {}
    if "configMap" in volume:
        source = volume["configMap"]
        values = _lookup_volume(cluster, namespace, "ConfigMap", source)
        return _items(values, source.get("items")) if values is not None else {}
    if "projected" in volume:
        files: dict[str, bytes] = {}
        for source in volume["projected"].get("sources") or []:
            if "secret" in source:
                values = _lookup_volume(cluster, namespace, "Secret", source["secret"])
                files.update(_items(values or {}, source["secret"].get("items")))
            if "configMap" in source:
                values = _lookup_volume(cluster, namespace, "ConfigMap", source["configMap"])
                files.update(_items(values or {}, source["configMap"].get("items")))
            if "serviceAccountToken" in source:
                spec = source["serviceAccountToken"]
                files[spec.get("path", "token")] = _account_token(
                    cluster, pod, spec.get("expirationSeconds", 3600), spec.get("audience")
                )
            if "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    path = item.get("fieldRef", {}).get("fieldPath", "")
                    files[item["path"]] = _field_ref(pod, path).encode()
        return files
    return None


def _lookup_volume(cluster: KubeCluster, namespace: str, kind: str, ref: dict[str, Any]) -> dict[str, bytes] | None:
    try:
        return _lookup(cluster, namespace, kind, ref, None)
    except UnresolvedReference as exc:
        raise UnresolvedReference("ContainerCreating", str(exc)) from exc


def _account_token(cluster: KubeCluster, pod: dict[str, Any], seconds: float, audience: str | None = None) -> bytes:
    """The projected token the kubelet asks for: a JWT bound to the pod (and its node)."""
    namespace = pod["metadata"].get("namespace", "")
    name = pod.get("spec", {}).get("serviceAccountName") or "default"
    if cluster.store.peek(cluster.resource("v1", "ServiceAccount"), namespace, name) is None:
        raise UnresolvedReference("ContainerCreating", f'serviceaccount "{name}" not found')
    audiences = [audience] if audience else None
    minted = mint_account_token(cluster, namespace, name, int(seconds), audiences, pod["metadata"]["name"])
    return str(minted["status"]["token"]).encode()


def resolve_container(
    cluster: KubeCluster, pod: dict[str, Any], container: dict[str, Any], *, init: bool
) -> ContainerRun:
    """Everything the container would see; raises UnresolvedReference when it cannot start."""
    spec = pod.get("spec", {})
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    files: dict[str, bytes] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name", ""))
        if volume is None:
            continue
        content = _volume_files(cluster, pod, volume)
        if content is None:
            continue
        base = mount["mountPath"].rstrip("/")
        sub_path = mount.get("subPath")
        if sub_path:
            if sub_path in content:
                files[base] = content[sub_path]
            continue
        files.update({f"{base}/{key}": value for key, value in content.items()})
    if spec.get("automountServiceAccountToken", True):
        directory = "/var/run/secrets/kubernetes.io/serviceaccount"
        files[f"{directory}/token"] = _account_token(cluster, pod, 3607)
        files[f"{directory}/ca.crt"] = base64.b64decode(cluster.ca_data)
        files[f"{directory}/namespace"] = pod["metadata"].get("namespace", "").encode()
    return ContainerRun(
        name=container["name"],
        image=str(container.get("image", "")),
        command=tuple(container.get("command") or ()),
        args=tuple(container.get("args") or ()),
        env=_env(cluster, pod, container),
        files=files,
        init=init,
    )
