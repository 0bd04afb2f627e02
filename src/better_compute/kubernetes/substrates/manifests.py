"""bcd's objects on a substrate's cluster: a Namespace, a ConfigMap, a DaemonSet and the join Secret.

Pure functions from the pool and the agent to manifests. Every object carries the
substrate's label (`better-compute.dev/substrate-pool=<pool id>`), so that teardown
finds all of them and nothing else. The DaemonSet selects exactly the Nodes of the
substrate's node pools (they carry the same label), tolerates the GPU taints the
providers put on GPU nodes, and runs `bcd join` as an init container, then `bcd run`.
The join Secret is mounted non-optional: a pod waits for it rather than failing, and a
bcd that has joined keeps its credential on the node (hostPath) and needs no token again.
The join container also gets a projected ServiceAccount token for `JOIN_AUDIENCE`, which
the kubelet binds to the pod and its Node: bcd presents it at join as proof of its Node
(substrates/identity.py). No other token is mounted: bcd never calls the Kubernetes API.
"""

from __future__ import annotations

import base64
from typing import Any

from better_compute.kubernetes.access import MANAGED_BY_KEY, MANAGED_BY_VALUE
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.names import JOIN_AUDIENCE, SUBSTRATE_POOL_LABEL

__all__ = [
    "APP_LABEL",
    "CONFIG_MAP",
    "DAEMON_SET",
    "JOIN_SECRET",
    "JOIN_TOKEN_ID_KEY",
    "NAMESPACE",
    "SERVICE_ACCOUNT",
    "bcd_objects",
    "join_secret",
    "substrate_labels",
]

NAMESPACE = "bc-system"
CONFIG_MAP = "bcd"
DAEMON_SET = "bcd"
JOIN_SECRET = "bcd-join"
SERVICE_ACCOUNT = "default"
"""bcd's pods run as their namespace's default ServiceAccount, which no Role grants anything."""
IDENTITY_TOKEN_SECONDS = 3600
JOIN_TOKEN_ID_KEY = "better-compute.dev/join-token-id"
"""The join Secret's annotation: the id of the token it holds (an id, never the value)."""
APP_LABEL = "app.kubernetes.io/name"

TOKEN_DIR = "/var/run/bcd/join"
IDENTITY_DIR = "/var/run/bcd/identity"
STATE_DIR = "/var/lib/bcd"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
CONFIG_DIR = "/etc/bcd"

GPU_TAINTS = ("nvidia.com/gpu", "amd.com/gpu", "sku", "kubernetes.azure.com/scalesetpriority")
"""Taints GPU node pools carry at the providers (GKE and EKS put `nvidia.com/gpu` on GPU nodes)."""


def substrate_labels(pool_id: str) -> dict[str, str]:
    return {SUBSTRATE_POOL_LABEL: pool_id, APP_LABEL: "bcd", MANAGED_BY_KEY: MANAGED_BY_VALUE}


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


def _container(name: str, agent: SubstrateAgent, args: list[str], mounts: list[dict[str, Any]]) -> dict[str, Any]:
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
        ],
        "volumeMounts": mounts,
    }


def _daemon_set(pool_id: str, agent: SubstrateAgent) -> dict[str, Any]:
    selector = {SUBSTRATE_POOL_LABEL: pool_id, APP_LABEL: "bcd"}
    config = {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}
    state = {"name": "state", "mountPath": STATE_DIR}
    join_token = {"name": "join-token", "mountPath": TOKEN_DIR, "readOnly": True}
    identity = {"name": "identity", "mountPath": IDENTITY_DIR, "readOnly": True}
    join = _container("join", agent, ["join"], [join_token, identity, state, config])
    run = _container("bcd", agent, ["run"], [state, {"name": "device-plugins", "mountPath": DEVICE_PLUGIN_DIR}, config])
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(DAEMON_SET, pool_id),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": substrate_labels(pool_id)},
                "spec": {
                    "nodeSelector": {SUBSTRATE_POOL_LABEL: pool_id},
                    "tolerations": [{"key": key, "operator": "Exists"} for key in GPU_TAINTS],
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
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
                    ],
                },
            },
        },
    }


def bcd_objects(pool_id: str, agent: SubstrateAgent) -> list[dict[str, Any]]:
    """What each run applies, in order: the Namespace first, the DaemonSet last."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, pool_id, None)}
    return [namespace, _config(pool_id, agent), _daemon_set(pool_id, agent)]


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
