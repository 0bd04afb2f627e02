"""The simulated world: emulators of GKE, EKS, DOKS and the Kubernetes API, and the conformance kit.

Product code never imports this package (import-linter holds that).
"""

from typing import TYPE_CHECKING, Any

from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)

if TYPE_CHECKING:
    from better_compute.testing.cloud import Cloud

__all__ = ["Cloud", "KubernetesSubject", "PoolShape", "kubernetes_provider_conformance_cases"]


def __getattr__(name: str) -> Any:
    """`Cloud` loads the three emulators and drivers (boto3, pydo, google-cloud-container) only when asked for."""
    if name == "Cloud":
        from better_compute.testing.cloud import Cloud

        return Cloud
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
