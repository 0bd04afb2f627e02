"""The GKE driver passes the whole conformance kit against the GKE emulator."""

from __future__ import annotations

import secrets

from gke_world import PROJECT, Gke
from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from better_compute.core.conformance import run_conformance
from better_compute.kubernetes.client import kube_client
from better_compute.kubernetes.provider import Accelerators, ClusterCredentials
from better_compute.testing import KubernetesSubject, PoolShape, kubernetes_provider_conformance_cases
from better_compute.testing.gke import SeedPool


def make_subject_factory(gke: Gke, provider: object | None = None):  # type: ignore[no-untyped-def]
    async def accepts(credentials: ClusterCredentials) -> bool:
        if credentials.token not in gke.emulator.issued:
            return False
        client = kube_client(credentials)
        try:
            return bool([node async for node in client.list(Node)])
        except ApiError:
            return False
        finally:
            await client.close()

    async def factory() -> KubernetesSubject:
        adoptable = await gke.emulator.seed_cluster(
            f"theirs-{secrets.token_hex(3)}",
            project=PROJECT,
            location="us-central1",
            pools=(SeedPool("default-pool"), SeedPool("their-gpus", machine_type="g2-standard-4")),
        )
        return KubernetesSubject(
            provider=provider or gke.provider,  # type: ignore[arg-type]
            config={"projectId": PROJECT},
            location="us-central1",
            node_pool=PoolShape("e2-standard-4", 1),
            gpu_node_pool=PoolShape("g2-standard-4", 1, Accelerators("nvidia-l4", 1)),
            accepts=accepts,
            upgrade_from="1.30",
            upgrade_to="1.31",
            adoptable=adoptable,
            absent_adoptable="us-central1/no-such-cluster",
            clock=gke.clock,
            advance=gke.advance,
        )

    return factory


async def test_gke_passes_the_whole_kit(gke: Gke) -> None:
    report = await run_conformance(kubernetes_provider_conformance_cases(), make_subject_factory(gke))
    assert report.passed, report.render()
    assert len(report.results) == 9
