"""`testing.Cloud` wires one clock and one Kubernetes API emulator under the GKE, EKS and DOKS emulators."""

from __future__ import annotations

from lightkube.resources.core_v1 import Namespace

from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterSpec, ClusterStatus, ProviderKubernetes
from better_compute.testing.cloud import Cloud
from better_compute.vps.provider import ProviderAccount

EKS_CONFIG = {
    "region": "us-east-1",
    "zones": ["us-east-1a", "us-east-1b"],
    "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
    "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
    "eksSubnetIds": ["subnet-0000000000000000a", "subnet-0000000000000000b"],
}


async def test_one_document_three_clouds_one_clock_one_kubernetes_api_emulator() -> None:
    async with Cloud() as cloud:

        async def resolve(reference: str) -> str:
            assert reference == "secret://tenant_1/doks"
            return cloud.doks_token

        places = {
            "gcp": ({"projectId": "my-project", "zones": ["us-central1-a"]}, "us-central1"),
            "aws": (EKS_CONFIG, "us-east-1"),
            "digitalocean": ({"token": "secret://tenant_1/doks", "regions": ["tor1"]}, "tor1"),
        }
        made: list[tuple[ProviderKubernetes, ProviderAccount, str]] = []
        for provider in cloud.providers():
            assert provider.kubernetes is not None
            config, location = places[provider.name]
            account = ProviderAccount("managed-k8s", provider.name, "tenant_1", config, resolve_secret=resolve)
            state = await provider.kubernetes.ensure_cluster(account, ClusterSpec(name="bc-cloud", location=location))
            assert state.status == ClusterStatus.PROVISIONING
            made.append((provider.kubernetes, account, state.cluster_id))

        start = cloud.clock.now()
        for _ in range(120):
            states = [await driver.get_cluster(account, cluster_id) for driver, account, cluster_id in made]
            if all(s is not None and s.status == ClusterStatus.READY for s in states):
                break
            await cloud.advance(30)
        assert all(s is not None and s.status == ClusterStatus.READY for s in states), states
        assert (cloud.clock.now() - start).total_seconds() <= 3600
        assert len(cloud.kube.clusters) == 3

        for driver, account, cluster_id in made:
            credentials = await driver.credentials(account, cluster_id)
            client = kube_client(credentials)
            try:
                assert [ns async for ns in client.list(Namespace)]
            finally:
                await client.close()
        assert cloud.gke.issued and cloud.eks.issued and cloud.doks.issued
