"""bcd's objects on a substrate's cluster: a Namespace, a ResourceQuota where the provider needs
one, a ConfigMap, a DaemonSet and the join Secret.

Pure functions from the pool, the agent and the provider's GPU node (`GpuNode`) to manifests.
Every object carries the substrate's label (`better-compute.dev/substrate-pool=<pool id>`), so
that teardown finds all of them and nothing else. The DaemonSet selects exactly the Nodes of
the substrate's node pools (they carry the same label) and runs `bcd join` as an init
container, then `bcd run`. The join Secret is mounted non-optional: a pod waits for it rather
than failing, and a bcd that has joined keeps its credential on the node (hostPath) and needs
no token again. The join container also gets a projected ServiceAccount token for
`JOIN_AUDIENCE`, which the kubelet binds to the pod and its Node: bcd presents it at join as
proof of its Node (substrates/node_identity.py). No other token is mounted: bcd never calls the
Kubernetes API.

Why each setting (docs/providers.md has each provider's facts and sources):
- Pod Security: bc-system is labelled `pod-security.kubernetes.io/enforce: privileged`, because
  bcd cannot run at baseline: it needs hostPath volumes (its credential in /var/lib/bcd, the
  kubelet's device-plugin directory for its socket, and on GKE the driver directory and /dev),
  which baseline forbids, so a cluster whose default level is baseline or restricted would
  refuse its pods. The label is the least level that admits them; what the pods ask for is kept
  small instead: no host network, PID or IPC; where the NVIDIA runtime injects the GPUs both
  containers run unprivileged with every capability dropped and no privilege escalation, under
  the runtime's default seccomp profile (on GKE they must be privileged: see NVML).
- Priority: `system-node-critical` (the agent may name another, or "" for none), because bcd is
  the Node's only way to its GPUs and must not be evicted before the workloads it serves. GKE
  admits that class only in a namespace whose ResourceQuota covers it, so on GKE bc-system gets
  `bcd-critical-pods`, scoped to that class alone, with GKE's own ceiling (`pods: 1G`): it
  permits, it is not meant to limit (bcd's pod and GKE's driver installer, gpu_driver.py, one
  each per Node, are all that run there at that class).
- NVML (both containers read it: the join reports the node's GPUs, bcd run advertises them): on
  GKE (Container-Optimized OS, no NVIDIA runtime) they mount the host's driver directory at
  /usr/local/nvidia with LD_LIBRARY_PATH=/usr/local/nvidia/lib64 and the host's /dev, and are
  privileged, as GKE's own device plugin is: without it the device cgroup keeps /dev/nvidia*
  closed. Where the NVIDIA runtime is the default (EKS AL2023 NVIDIA, DOKS) they ask it for every
  GPU with NVIDIA_VISIBLE_DEVICES=all and only the utility capability (NVML),
  NVIDIA_DRIVER_CAPABILITIES=utility, and also as a volume mount (/dev/null at
  /var/run/nvidia-container-devices/all), the form the runtime still takes from an unprivileged
  container once bcd has turned the variable off for them (gpu_driver.py), so they stay unprivileged.
- Tolerations: `nvidia.com/gpu` and `amd.com/gpu` with any value and effect (GKE taints GPU
  nodes `nvidia.com/gpu=present:NoSchedule`, DOKS `nvidia.com/gpu:NoSchedule` or
  `amd.com/gpu:NoSchedule`; EKS managed node groups carry only the taints given at creation,
  and an operator's GPU taint is this one by convention), plus the agent's own.
"""

from __future__ import annotations

import base64
from typing import Any

from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.names import (
    APP_LABEL,
    BCD_NAMESPACE,
    JOIN_AUDIENCE,
    SUBSTRATE_POOL_LABEL,
    substrate_labels,
)
from better_compute.kubernetes.provider import GpuNode

__all__ = [
    "APP_LABEL",
    "CONFIG_MAP",
    "CRITICAL_QUOTA",
    "DAEMON_SET",
    "JOIN_SECRET",
    "JOIN_TOKEN_ID_KEY",
    "NAMESPACE",
    "SERVICE_ACCOUNT",
    "bcd_objects",
    "join_secret",
    "substrate_labels",
]

NAMESPACE = BCD_NAMESPACE
CONFIG_MAP = "bcd"
DAEMON_SET = "bcd"
JOIN_SECRET = "bcd-join"
CRITICAL_QUOTA = "bcd-critical-pods"
SERVICE_ACCOUNT = "default"
"""bcd's pods run as their namespace's default ServiceAccount, which no Role grants anything."""
IDENTITY_TOKEN_SECONDS = 3600
JOIN_TOKEN_ID_KEY = "better-compute.dev/join-token-id"
"""The join Secret's annotation: the id of the token it holds (an id, never the value)."""

TOKEN_DIR = "/var/run/bcd/join"
IDENTITY_DIR = "/var/run/bcd/identity"
STATE_DIR = "/var/lib/bcd"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
CONFIG_DIR = "/etc/bcd"
DRIVER_MOUNT = "/usr/local/nvidia"
VISIBLE_DEVICES_MOUNTS = "/var/run/nvidia-container-devices"
PRIORITY_CLASS = "system-node-critical"
CRITICAL_CLASSES = ("system-node-critical", "system-cluster-critical")
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "privileged"}

GPU_TAINTS = ("nvidia.com/gpu", "amd.com/gpu")
"""The taint keys the providers put on GPU nodes (see the module's docstring)."""
UNPRIVILEGED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _meta(name: str, pool_id: str, namespace: str | None = NAMESPACE) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": substrate_labels(pool_id)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _config(pool_id: str, agent: SubstrateAgent) -> dict[str, Any]:
    data = {
        "BCD_CONTROL_PLANE_URL": agent.control_plane_url,
        "BCD_GATEWAY_URL": agent.gateway_url,
        "BCD_PINS": ",".join(agent.pins),
        "BCD_RESOURCE_NAME": agent.resource_name,
    }
    if agent.ca_pem:
        data["BCD_CA_FILE"] = f"{CONFIG_DIR}/ca.crt"
        data["ca.crt"] = agent.ca_pem
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(CONFIG_MAP, pool_id), "data": data}


def _container(
    name: str,
    agent: SubstrateAgent,
    args: list[str],
    mounts: list[dict[str, Any]],
    extra_env: list[dict[str, str]],
    security: dict[str, Any],
) -> dict[str, Any]:
    return {
        "name": name,
        "image": agent.image,
        "args": args,
        "envFrom": [{"configMapRef": {"name": CONFIG_MAP}}],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "BCD_JOIN_TOKEN_FILE", "value": f"{TOKEN_DIR}/token"},
            {"name": "BCD_IDENTITY_TOKEN_FILE", "value": f"{IDENTITY_DIR}/token"},
            {"name": "BCD_STATE_DIR", "value": STATE_DIR},
            {"name": "BCD_KUBELET_SOCKET", "value": f"{DEVICE_PLUGIN_DIR}/kubelet.sock"},
            *extra_env,
        ],
        "volumeMounts": mounts,
        "securityContext": security,
    }


def _nvml(gpu_node: GpuNode) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, str]], dict[str, Any]]:
    """bcd's container's way to NVML on this node image: (volumes, mounts, env, securityContext)."""
    if gpu_node.driver_dir is None:
        env = [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ]
        every_gpu: list[dict[str, Any]] = [{"name": "nvidia-every-gpu", "hostPath": {"path": "/dev/null"}}]
        ask = [{"name": "nvidia-every-gpu", "mountPath": f"{VISIBLE_DEVICES_MOUNTS}/all", "readOnly": True}]
        return every_gpu, ask, env, dict(UNPRIVILEGED)
    volumes: list[dict[str, Any]] = [
        # DirectoryOrCreate, as GKE's own plugin mounts it: a pod on a node whose driver is not there yet starts
        {"name": "nvidia-driver", "hostPath": {"path": gpu_node.driver_dir, "type": "DirectoryOrCreate"}},
        {"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "nvidia-driver", "mountPath": DRIVER_MOUNT, "readOnly": True},
        {"name": "dev", "mountPath": "/dev"},
    ]
    env = [{"name": "LD_LIBRARY_PATH", "value": f"{DRIVER_MOUNT}/lib64"}]
    return volumes, mounts, env, {"privileged": True}


def _priority_class(agent: SubstrateAgent) -> str:
    return PRIORITY_CLASS if agent.priority_class_name is None else agent.priority_class_name


def _daemon_set(pool_id: str, agent: SubstrateAgent, gpu_node: GpuNode) -> dict[str, Any]:
    selector = {SUBSTRATE_POOL_LABEL: pool_id, APP_LABEL: "bcd"}
    config = {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}
    state = {"name": "state", "mountPath": STATE_DIR}
    join_token = {"name": "join-token", "mountPath": TOKEN_DIR, "readOnly": True}
    identity = {"name": "identity", "mountPath": IDENTITY_DIR, "readOnly": True}
    plugins = {"name": "device-plugins", "mountPath": DEVICE_PLUGIN_DIR}
    nvml_volumes, nvml_mounts, nvml_env, security = _nvml(gpu_node)
    join_mounts: list[dict[str, Any]] = [join_token, identity, state, config, *nvml_mounts]  # it reports the GPUs
    join = _container("join", agent, ["join"], join_mounts, nvml_env, security)
    run = _container("bcd", agent, ["run"], [state, plugins, config, *nvml_mounts], nvml_env, dict(security))
    tolerations: list[dict[str, Any]] = [{"key": key, "operator": "Exists"} for key in GPU_TAINTS]
    tolerations += [dict(t) for t in agent.tolerations if t not in tolerations]
    pod_spec: dict[str, Any] = {
        "nodeSelector": {SUBSTRATE_POOL_LABEL: pool_id},
        "tolerations": tolerations,
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [join],
        "containers": [run],
        "volumes": [
            {"name": "join-token", "secret": {"secretName": JOIN_SECRET}},
            {
                "name": "identity",
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "audience": JOIN_AUDIENCE,
                                "expirationSeconds": IDENTITY_TOKEN_SECONDS,
                                "path": "token",
                            }
                        }
                    ]
                },
            },
            {"name": "state", "hostPath": {"path": STATE_DIR, "type": "DirectoryOrCreate"}},
            {"name": "device-plugins", "hostPath": {"path": DEVICE_PLUGIN_DIR, "type": "Directory"}},
            {"name": "config", "configMap": {"name": CONFIG_MAP}},
            *nvml_volumes,
        ],
    }
    if _priority_class(agent):
        pod_spec["priorityClassName"] = _priority_class(agent)
    if agent.runtime_class_name:
        pod_spec["runtimeClassName"] = agent.runtime_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(DAEMON_SET, pool_id),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": substrate_labels(pool_id)}, "spec": pod_spec},
        },
    }


def _critical_quota(pool_id: str, priority_class: str) -> dict[str, Any]:
    scope = {"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(CRITICAL_QUOTA, pool_id),
        "spec": {"hard": {"pods": "1G"}, "scopeSelector": {"matchExpressions": [scope]}},
    }


def bcd_objects(pool_id: str, agent: SubstrateAgent, gpu_node: GpuNode) -> list[dict[str, Any]]:
    """What each run applies, in order: the Namespace first, then what admits bcd's pods, the DaemonSet last."""
    meta = _meta(NAMESPACE, pool_id, None)
    meta["labels"] = {**meta["labels"], **POD_SECURITY}
    objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": meta}]
    priority_class = _priority_class(agent)
    if gpu_node.critical_pods_quota and priority_class in CRITICAL_CLASSES:
        objects.append(_critical_quota(pool_id, priority_class))
    return [*objects, _config(pool_id, agent), _daemon_set(pool_id, agent, gpu_node)]


def join_secret(pool_id: str, token_id: str, token: str) -> dict[str, Any]:
    """The join token for bcd's join container. Its value exists only here and in the cluster;
    the token's id (annotated) tells a later run which recorded token the Secret holds."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**_meta(JOIN_SECRET, pool_id), "annotations": {JOIN_TOKEN_ID_KEY: token_id}},
        "type": "Opaque",
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }
