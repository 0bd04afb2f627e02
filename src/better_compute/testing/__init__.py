"""The simulated world: emulators of GKE, EKS, DOKS and the Kubernetes API, and the conformance kit.

    from better_compute.testing import Cloud, KubeApiServer, GkeEmulator, EksEmulator, DoksEmulator

Product code never imports this package (import-linter holds that). The emulators
load their SDK-facing pieces only when first asked for, so importing the
conformance kit stays cheap.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)

if TYPE_CHECKING:
    from better_compute.testing.cloud import Cloud
    from better_compute.testing.doks import DoksEmulator
    from better_compute.testing.eks import EksEmulator
    from better_compute.testing.gke import GkeEmulator
    from better_compute.testing.kube import KubeApiServer, KubeCluster, KubeletSimulator
    from better_compute.testing.loopback import LoopbackServer

_LAZY = {
    "Cloud": "better_compute.testing.cloud",
    "DoksEmulator": "better_compute.testing.doks",
    "EksEmulator": "better_compute.testing.eks",
    "GkeEmulator": "better_compute.testing.gke",
    "KubeApiServer": "better_compute.testing.kube",
    "KubeCluster": "better_compute.testing.kube",
    "KubeletSimulator": "better_compute.testing.kube",
    "LoopbackServer": "better_compute.testing.loopback",
}

__all__ = [
    "Cloud",
    "DoksEmulator",
    "EksEmulator",
    "GkeEmulator",
    "KubeApiServer",
    "KubeCluster",
    "KubeletSimulator",
    "KubernetesSubject",
    "LoopbackServer",
    "PoolShape",
    "kubernetes_provider_conformance_cases",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
