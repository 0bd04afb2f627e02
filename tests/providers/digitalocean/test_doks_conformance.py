"""The DOKS driver passes the whole Kubernetes provider conformance kit against the DOKS emulator."""

from __future__ import annotations

import uuid

from doks_world import World
from lightkube import ApiError
from lightkube.resources.core_v1 import Namespace

from better_compute.core.conformance import run_conformance
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import Accelerators, ClusterCredentials
from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)


async def test_the_driver_passes_every_conformance_case(world: World) -> None:
    account = world.account(allowSpot=True, previews=True)
    adoptable = await world.doks.seed_cluster(
        name="users-own",
        node_pools=({"name": "users-pool", "size": "s-4vcpu-8gb", "count": 2},),
        nvidia_gpu_device_plugin=False,
        amd_gpu_device_plugin=False,
    )

    async def accepts(credentials: ClusterCredentials) -> bool:
        """Minted by the emulator, and the cluster's API server answers a request made with it."""
        if credentials.token not in world.doks.issued:
            return False
        client = kube_client(credentials)
        try:
            namespaces = [ns async for ns in client.list(Namespace)]
        except ApiError:
            return False
        finally:
            await client.close()
        return bool(namespaces)

    def subject() -> KubernetesSubject:
        return KubernetesSubject(
            provider=world.provider,
            config=account.config,
            location="tor1",
            node_pool=PoolShape("s-2vcpu-4gb", 1),
            gpu_node_pool=PoolShape("gpu-h100x8-640gb", 1, Accelerators("nvidia-h100", 8)),
            accepts=accepts,
            zero_nodes=False,
            spot=True,
            upgrade_from="1.32",
            upgrade_to="1.33",
            adoptable=adoptable,
            absent_adoptable=str(uuid.uuid4()),
            clock=world.clock,
            advance=world.advance,
            resolve_secret=account.resolve_secret,
            tenant_id=account.tenant_id,
        )

    report = await run_conformance(kubernetes_provider_conformance_cases(), subject)

    assert report.passed, report.render()
    assert len(report.results) == len(kubernetes_provider_conformance_cases())
