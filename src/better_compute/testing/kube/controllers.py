"""The control plane's housekeeping controllers, run to a fixed point by `settle`.

- garbage collector: an object whose owners are all gone is deleted; an owner
  deleted in the foreground keeps its `foregroundDeletion` finalizer until its
  dependents are gone;
- pod GC: a pod bound to a Node that no longer exists is deleted;
- namespace controller: a Terminating namespace loses its contents, then itself;
- service-account controller: every namespace gets its `default` account;
- ClusterRole aggregation: a ClusterRole with an `aggregationRule` holds the
  rules of every ClusterRole its selectors pick (how `admin`, `edit`, `view` grow);
- the DaemonSet controller (daemonsets.py), which tries again when what admits its pods
  changes (a ResourceQuota, a namespace's labels, a PriorityClass);
- the quota controller: ResourceQuota status (quota.py);
- the disruption controller: PodDisruptionBudget status (disruption.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.daemonsets import sync_daemonsets
from better_compute.testing.kube.disruption import sync_disruption_budgets
from better_compute.testing.kube.quota import sync_quota_status
from better_compute.testing.kube.resources import RESOURCES
from better_compute.testing.kube.selectors import selector_matches
from better_compute.testing.kube.store import Change

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["Dirty", "run_controllers"]


@dataclass
class Dirty:
    """What changed since the controllers last ran, so that each runs only when it may have work.

    `kinds` holds each changed kind, plus `<Kind>:lifecycle` when an object of it
    appeared, went or started terminating, and `DaemonSet:spec` when a DaemonSet's
    generation moved (its controller's own status writes do not wake it again).
    """

    kinds: set[str] = field(default_factory=set)
    deletions: bool = False
    owned: bool = False
    finalizing: bool = False
    generations: dict[str, int] = field(default_factory=dict)

    @classmethod
    def all(cls) -> Dirty:
        kinds = {rt.kind for rt in RESOURCES} | {f"{rt.kind}:lifecycle" for rt in RESOURCES} | {"DaemonSet:spec"}
        return cls(kinds, True, True, True)

    @property
    def empty(self) -> bool:
        return not self.kinds

    def note(self, change: Change) -> None:
        kind = change.resource.kind
        meta = change.object["metadata"]
        self.kinds.add(kind)
        if change.type != "MODIFIED" or "deletionTimestamp" in meta:
            self.kinds.add(f"{kind}:lifecycle")
        if kind == "DaemonSet":
            generation = int(meta.get("generation", 0))
            if change.type != "MODIFIED" or self.generations.get(meta["uid"]) != generation:
                self.kinds.add("DaemonSet:spec")
            self.generations[meta["uid"]] = generation
        self.deletions |= change.type == "DELETED"
        self.owned |= change.type == "ADDED" and bool(meta.get("ownerReferences"))
        self.finalizing |= "deletionTimestamp" in meta

    def take(self) -> Dirty:
        """What accumulated so far; the accumulator starts afresh (keeping what it knows of generations)."""
        taken = Dirty(self.kinds, self.deletions, self.owned, self.finalizing)
        self.kinds, self.deletions, self.owned, self.finalizing = set(), False, False, False
        return taken


def run_controllers(cluster: KubeCluster, dirty: Dirty) -> None:
    if dirty.deletions or dirty.owned or dirty.finalizing:
        _collect_garbage(cluster)
    if dirty.kinds & {"Node", "Pod:lifecycle"}:
        _collect_pods(cluster)
    if dirty.deletions or dirty.finalizing or "Namespace" in dirty.kinds:
        _finish_namespaces(cluster)
    if dirty.kinds & {"Namespace", "ServiceAccount"}:
        _default_service_accounts(cluster)
    if dirty.kinds & {"Node", "Pod", "DaemonSet:spec", "ResourceQuota", "Namespace", "PriorityClass"}:
        sync_daemonsets(cluster)
    if dirty.kinds & {"Pod", "ResourceQuota"}:
        sync_quota_status(cluster)
    if "ClusterRole" in dirty.kinds:
        _aggregate_cluster_roles(cluster)
    if dirty.kinds & {"Pod", "PodDisruptionBudget"}:
        sync_disruption_budgets(cluster)


def _collect_garbage(cluster: KubeCluster) -> None:
    everything = [(rt, obj) for rt in RESOURCES for obj in cluster.store.items(rt)]
    uids = {obj["metadata"]["uid"] for _, obj in everything}
    for rt, obj in everything:
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if refs and not any(ref.get("uid") in uids for ref in refs) and "deletionTimestamp" not in meta:
            cluster.ops.delete(rt, meta.get("namespace", ""), meta["name"])
    for rt, obj in everything:
        meta = obj["metadata"]
        if "deletionTimestamp" not in meta or "foregroundDeletion" not in (meta.get("finalizers") or []):
            continue
        dependents = [
            (drt, dep)
            for drt, dep in everything
            if any(r.get("uid") == meta["uid"] for r in dep["metadata"].get("ownerReferences") or [])
            and cluster.store.peek(drt, dep["metadata"].get("namespace", ""), dep["metadata"]["name"]) is not None
        ]
        for drt, dep in dependents:
            if "deletionTimestamp" not in dep["metadata"]:
                cluster.ops.delete(drt, dep["metadata"].get("namespace", ""), dep["metadata"]["name"])
        if not dependents:
            cluster.ops.remove_finalizer(rt, obj, "foregroundDeletion")


def _collect_pods(cluster: KubeCluster) -> None:
    pods = cluster.resource("v1", "Pod")
    nodes = {n["metadata"]["name"] for n in cluster.store.items(cluster.resource("v1", "Node"))}
    for pod in list(cluster.store.items(pods)):
        node = pod.get("spec", {}).get("nodeName")
        if node and node not in nodes:
            cluster.ops.delete(pods, pod["metadata"]["namespace"], pod["metadata"]["name"])


def _finish_namespaces(cluster: KubeCluster) -> None:
    namespaced = tuple(rt for rt in RESOURCES if rt.namespaced)
    for ns in list(cluster.store.items(cluster.resource("v1", "Namespace"))):
        name = ns["metadata"]["name"]
        if "deletionTimestamp" not in ns["metadata"]:
            continue
        for rt in namespaced:
            for obj in list(cluster.store.items(rt, name)):
                if "deletionTimestamp" not in obj["metadata"]:
                    cluster.ops.delete(rt, name, obj["metadata"]["name"])
        if cluster.store.count_in_namespace(name, namespaced) == 0:
            cluster.ops.finalize_namespace(name)


def _default_service_accounts(cluster: KubeCluster) -> None:
    accounts = cluster.resource("v1", "ServiceAccount")
    for ns in list(cluster.store.items(cluster.resource("v1", "Namespace"))):
        name = ns["metadata"]["name"]
        if "deletionTimestamp" not in ns["metadata"] and cluster.store.peek(accounts, name, "default") is None:
            cluster.ops.create(accounts, name, {"metadata": {"name": "default"}}, manager="kube-controller-manager")


def _aggregate_cluster_roles(cluster: KubeCluster) -> None:
    rt = cluster.resource("rbac.authorization.k8s.io/v1", "ClusterRole")
    roles = cluster.store.items(rt)
    for role in roles:
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors")
        if selectors is None:
            continue
        rules: list[dict[str, Any]] = []
        for other in roles:
            labels = other["metadata"].get("labels") or {}
            if other is role or not any(selector_matches(s, labels) for s in selectors):
                continue
            rules.extend(rule for rule in other.get("rules") or [] if rule not in rules)
        if rules != (role.get("rules") or []):
            updated = copy.deepcopy(role)
            updated["rules"] = rules
            cluster.ops.update(rt, "", role["metadata"]["name"], updated, manager="clusterrole-aggregation-controller")
