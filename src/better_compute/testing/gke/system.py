"""What GKE's control plane puts in every cluster before anyone else writes to it.

GKE's API server limits the critical priority classes by default (the ResourceQuota
admission's `limitedResources`), and its addon manager keeps `kube-system/gcp-critical-pods`
(`pods: 1G`, scoped to `system-node-critical` and `system-cluster-critical`) so that its own
pods are admitted there. A pod of those classes in any other namespace is refused unless that
namespace has a quota covering the scope (open-policy-agent/gatekeeper #1120,
openservicemesh/osm #4408, where `kubectl get -n kube-system resourcequota gcp-critical-pods`
is shown; kubernetes.io, Resource Quotas, "Limit Priority Class consumption by default").
"""

from __future__ import annotations

from better_compute.testing.kube import KubeCluster
from better_compute.testing.kube.admission import GKE_CRITICAL_SCOPE

__all__ = ["CRITICAL_PODS_QUOTA", "install_gke_system"]

CRITICAL_PODS_QUOTA = "gcp-critical-pods"


def install_gke_system(kube: KubeCluster) -> None:
    kube.admission.limited_scopes = (GKE_CRITICAL_SCOPE,)
    quota = {
        "metadata": {
            "name": CRITICAL_PODS_QUOTA,
            "namespace": "kube-system",
            "labels": {"addonmanager.kubernetes.io/mode": "Reconcile"},
        },
        "spec": {"hard": {"pods": "1G"}, "scopeSelector": {"matchExpressions": [dict(GKE_CRITICAL_SCOPE)]}},
    }
    kube.ops.create(kube.resource("v1", "ResourceQuota"), "kube-system", quota, manager="addon-manager")
    kube.settle()
