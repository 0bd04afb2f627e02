"""The DaemonSet controller: one pod per fitting Node, and a truthful status.

It creates a pod (bound with `spec.nodeName`) on every Node the template fits,
deletes pods on Nodes that no longer fit or are gone, replaces pods of an older
template generation (RollingUpdate), and writes `status` counts and
`observedGeneration` through the status subresource. A pod the API server refuses
(admission: quota, Pod Security, an unknown PriorityClass) is not there: the DaemonSet
gets a Warning `FailedCreate` event `Error creating: <the refusal>`, as the real
controller records, and its status counts the Node as unavailable.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.events import record_event
from better_compute.testing.kube.scheduling import DAEMONSET_TOLERATIONS, fits
from better_compute.testing.kube.status import KubeError

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["Placements", "sync_daemonsets"]

MANAGER = "kube-controller-manager"
COMPONENT = "daemonset-controller"


def _owned_by(pod: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid and r.get("controller") for r in pod["metadata"].get("ownerReferences") or [])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Placements:
    """Which Nodes each DaemonSet's template fits, remembered per Node until the Node or the
    DaemonSet's generation changes: the controller runs after every pod write, and checking
    every Node's labels, taints and affinity each time grows with the cluster's Nodes."""

    def __init__(self) -> None:
        self._fits: dict[str, dict[str, tuple[str, str, bool]]] = {}

    def wanted(self, ds: dict[str, Any], nodes: list[dict[str, Any]]) -> set[str]:
        meta = ds["metadata"]
        generation = str(meta.get("generation", 1))
        pod_spec = ds.get("spec", {}).get("template", {}).get("spec", {})
        known = self._fits.get(meta["uid"], {})
        current: dict[str, tuple[str, str, bool]] = {}
        for node in nodes:
            name, version = node["metadata"]["name"], str(node["metadata"].get("resourceVersion"))
            seen = known.get(name)
            if seen is None or seen[:2] != (generation, version):
                seen = (generation, version, fits(pod_spec, node))
            current[name] = seen
        self._fits[meta["uid"]] = current
        return {name for name, (_, _, fit) in current.items() if fit}

    def forget_missing(self, uids: set[str]) -> None:
        for uid in [u for u in self._fits if u not in uids]:
            del self._fits[uid]


def sync_daemonsets(cluster: KubeCluster) -> None:
    ds_rt = cluster.resource("apps/v1", "DaemonSet")
    pod_rt = cluster.resource("v1", "Pod")
    nodes = cluster.store.items(cluster.resource("v1", "Node"))
    daemonsets = list(cluster.store.items(ds_rt))
    cluster.placements.forget_missing({ds["metadata"]["uid"] for ds in daemonsets})
    for ds in daemonsets:
        meta = ds["metadata"]
        if "deletionTimestamp" in meta:
            continue
        namespace = meta["namespace"]
        generation = str(meta.get("generation", 1))
        pods = [p for p in cluster.store.items(pod_rt, namespace) if _owned_by(p, meta["uid"])]
        live = [p for p in pods if "deletionTimestamp" not in p["metadata"]]
        wanted = cluster.placements.wanted(ds, nodes)
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in live:
            by_node.setdefault(pod.get("spec", {}).get("nodeName", ""), []).append(pod)
        for node_name, on_node in by_node.items():
            current = [
                p for p in on_node if p["metadata"].get("labels", {}).get("pod-template-generation") == generation
            ]
            keep = current[:1] if node_name in wanted else []
            for pod in on_node:
                if pod not in keep:
                    cluster.ops.delete(pod_rt, namespace, pod["metadata"]["name"])
        for node_name in sorted(wanted):
            if not any(
                p["metadata"].get("labels", {}).get("pod-template-generation") == generation
                for p in by_node.get(node_name, [])
            ):
                try:
                    cluster.ops.create(pod_rt, namespace, _pod_for(ds, node_name, generation), manager=MANAGER)
                except KubeError as refused:
                    record_event(cluster, ds, "FailedCreate", f"Error creating: {refused.message}", component=COMPONENT)
        _write_status(cluster, ds, wanted, generation)


def _pod_for(ds: dict[str, Any], node_name: str, generation: str) -> dict[str, Any]:
    meta = ds["metadata"]
    template = copy.deepcopy(ds.get("spec", {}).get("template", {}))
    revision = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
    labels = dict(template.get("metadata", {}).get("labels") or {})
    labels["controller-revision-hash"] = revision
    labels["pod-template-generation"] = generation
    spec = template.get("spec", {})
    spec["nodeName"] = node_name
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in DAEMONSET_TOLERATIONS if t not in tolerations]
    spec["tolerations"] = tolerations
    pod_meta: dict[str, Any] = {
        "generateName": f"{meta['name']}-",
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    annotations = template.get("metadata", {}).get("annotations")
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _write_status(cluster: KubeCluster, ds: dict[str, Any], wanted: set[str], generation: str) -> None:
    pod_rt = cluster.resource("v1", "Pod")
    meta = ds["metadata"]
    pods = [
        p
        for p in cluster.store.items(pod_rt, meta["namespace"])
        if _owned_by(p, meta["uid"]) and "deletionTimestamp" not in p["metadata"]
    ]
    scheduled = {p.get("spec", {}).get("nodeName") for p in pods}
    ready = sum(1 for p in pods if _ready(p) and p["spec"].get("nodeName") in wanted)
    updated = sum(1 for p in pods if p["metadata"].get("labels", {}).get("pod-template-generation") == generation)
    status: dict[str, Any] = {
        "currentNumberScheduled": len(wanted & scheduled),
        "numberMisscheduled": len(scheduled - wanted),
        "desiredNumberScheduled": len(wanted),
        "numberReady": ready,
        "observedGeneration": int(generation),
        "updatedNumberScheduled": updated,
        "numberAvailable": ready,
    }
    if len(wanted) > ready:
        status["numberUnavailable"] = len(wanted) - ready
    if ds.get("status") != status:
        ds = {**ds, "status": status}
        cluster.ops.update(
            cluster.resource("apps/v1", "DaemonSet"),
            meta["namespace"],
            meta["name"],
            ds,
            manager=MANAGER,
            subresource="status",
        )
