"""The GKE driver passes the whole conformance kit against the GKE emulator."""

from __future__ import annotations

from gke_world import Gke, make_subject_factory

from better_compute.core.conformance import run_conformance
from better_compute.testing import kubernetes_provider_conformance_cases


async def test_gke_passes_the_whole_kit(gke: Gke) -> None:
    report = await run_conformance(kubernetes_provider_conformance_cases(), make_subject_factory(gke))
    assert report.passed, report.render()
    assert len(report.results) == 11
