"""`better_compute.testing` exports exactly what users' tests are meant to use."""

from __future__ import annotations

import subprocess
import sys

import better_compute.testing as testing


def test_every_exported_name_resolves_to_its_own_object() -> None:
    assert set(testing.__all__) == {
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
    }
    for name in testing.__all__:
        value = getattr(testing, name)
        assert getattr(value, "__name__", name) == name


def test_importing_the_kit_does_not_load_the_cloud_sdks() -> None:
    code = "import sys, better_compute.testing; print(any(m.startswith(('boto3', 'pydo', 'google.cloud')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
