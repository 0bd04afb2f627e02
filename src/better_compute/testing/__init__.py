"""The simulated world: emulators of GKE, EKS, DOKS and the Kubernetes API, and the conformance kit.

Product code never imports this package (import-linter holds that).
"""

from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)

__all__ = ["KubernetesSubject", "PoolShape", "kubernetes_provider_conformance_cases"]
