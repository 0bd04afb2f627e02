"""PodDisruptionBudgets and the Eviction subresource (`POST pods/<name>/eviction`).

The disruption controller keeps each budget's status: the pods its selector
picks (`expectedPods`), how many of them are Ready (`currentHealthy`), how many
must stay (`desiredHealthy`, from `minAvailable` or `maxUnavailable`, numbers or
percentages) and so how many may go (`disruptionsAllowed`). An eviction deletes
the pod when no budget covers it or its budget allows a disruption (spending
one), and otherwise answers 429 with the real server's words; a pod that is not
running (pending, finished, already terminating) is evicted regardless.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.operations import DeleteOptions
from better_compute.testing.kube.selectors import selector_matches
from better_compute.testing.kube.status import KubeError

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["evict", "sync_disruption_budgets"]

_PDB = ("policy/v1", "PodDisruptionBudget")


def _covers(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    selector = pdb.get("spec", {}).get("selector")
    return selector is not None and selector_matches(selector, pod["metadata"].get("labels") or {})


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(value: Any, total: int) -> int:
    """An IntOrString: a number, or a percentage of `total` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _status(pdb: dict[str, Any], pods: list[dict[str, Any]], now: str) -> dict[str, Any]:
    spec = pdb.get("spec", {})
    live = [p for p in pods if "deletionTimestamp" not in p["metadata"]]
    expected = len(live)
    healthy = sum(1 for p in live if _ready(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _count(spec["maxUnavailable"], expected))
    else:
        desired = _count(spec.get("minAvailable", 1), expected)
    allowed = max(0, healthy - desired)
    previous = pdb.get("status", {})
    condition = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
        "observedGeneration": pdb["metadata"].get("generation", 1),
    }
    old = next((c for c in previous.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    same = old is not None and old.get("status") == condition["status"]
    condition["lastTransitionTime"] = old["lastTransitionTime"] if same and old else now
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }


def sync_disruption_budgets(cluster: KubeCluster) -> None:
    """The disruption controller: every budget's status from the pods it covers."""
    rt = cluster.resource(*_PDB)
    pods = cluster.store.items(cluster.resource("v1", "Pod"))
    for pdb in cluster.store.items(rt):
        namespace = pdb["metadata"]["namespace"]
        covered = [p for p in pods if p["metadata"].get("namespace") == namespace and _covers(pdb, p)]
        status = _status(pdb, covered, cluster.ops.now())
        if status != pdb.get("status"):
            updated = copy.deepcopy(pdb)
            updated["status"] = status
            cluster.ops.update(
                rt, namespace, pdb["metadata"]["name"], updated, manager="kube-controller-manager", subresource="status"
            )


def _ignores_budgets(pod: dict[str, Any]) -> bool:
    phase = pod.get("status", {}).get("phase")
    return "deletionTimestamp" in pod["metadata"] or phase in ("Pending", "Succeeded", "Failed")


def evict(cluster: KubeCluster, namespace: str, name: str, body: Any, options: DeleteOptions) -> dict[str, Any]:
    """Answer an Eviction: delete the pod if its budget allows, else 429."""
    body = body if isinstance(body, dict) else {}
    if (body.get("metadata") or {}).get("name", name) != name:
        raise KubeError.bad_request("name in URL does not match name in Eviction object")
    pods = cluster.resource("v1", "Pod")
    pod = cluster.ops.get(pods, namespace, name)
    if not _ignores_budgets(pod):
        rt = cluster.resource(*_PDB)
        budgets = [b for b in cluster.store.items(rt, namespace) if _covers(b, pod)]
        if len(budgets) > 1:
            raise KubeError(
                500,
                "InternalError",
                "Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
                {
                    "causes": [
                        {
                            "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                            "subresource does not support."
                        }
                    ]
                },
            )
        if budgets:
            _spend(cluster, budgets[0], pod)
    cluster.ops.delete(pods, namespace, name, options)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _spend(cluster: KubeCluster, pdb: dict[str, Any], pod: dict[str, Any]) -> None:
    status = pdb.get("status") or {}
    if not _ready(pod) and int(status.get("currentHealthy", 0)) >= int(status.get("desiredHealthy", 0)):
        return  # an unhealthy pod may go while the budget holds (unhealthyPodEvictionPolicy IfHealthyBudget)
    if int(status.get("disruptionsAllowed", 0)) <= 0:
        name = pdb["metadata"]["name"]
        raise KubeError(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            {
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy "
                        f"pods and has {status.get('currentHealthy', 0)} currently",
                    }
                ]
            },
        )
    updated = copy.deepcopy(pdb)
    updated["status"]["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
    disrupted = updated["status"].setdefault("disruptedPods", {})
    disrupted[pod["metadata"]["name"]] = cluster.ops.now()
    cluster.ops.update(
        cluster.resource(*_PDB),
        pdb["metadata"]["namespace"],
        pdb["metadata"]["name"],
        updated,
        manager="kube-apiserver",
        subresource="status",
    )
