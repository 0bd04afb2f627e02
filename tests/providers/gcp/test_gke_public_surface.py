"""The public surface of providers.gcp, testing.gke and the conformance kit is decided, not accidental."""

from __future__ import annotations

import better_compute.core.conformance as conformance
import better_compute.providers.gcp as gcp
import better_compute.testing as testing
import better_compute.testing.gke as gke


def test_exports() -> None:
    assert set(gcp.__all__) == {"VOCABULARY", "GkeAccountConfig", "GkeKubernetes", "gcp_provider"}
    assert set(gke.__all__) == {"GkeEmulator", "GkeFaults", "SeedPool"}
    assert {"Cloud", "KubernetesSubject", "PoolShape", "kubernetes_provider_conformance_cases"} <= set(testing.__all__)
    assert set(conformance.__all__) == {
        "CaseResult",
        "ConformanceCase",
        "ConformanceFailure",
        "Report",
        "check",
        "fail",
        "note",
        "require",
        "run_conformance",
    }
    for module in (gcp, gke, testing, conformance):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_gcp_provider_is_a_gcp_provider_impl() -> None:
    impl = gcp.gcp_provider(endpoint="http://127.0.0.1:1")
    assert impl.name == "gcp"
    assert isinstance(impl.kubernetes, gcp.GkeKubernetes)
    assert impl.kubernetes.vocabulary.cluster_location == "region-or-zone" and impl.kubernetes.vocabulary.nodes_per_zone
    impl.kubernetes.close()
