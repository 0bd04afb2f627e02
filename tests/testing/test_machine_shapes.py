"""Nodes report what their machine type has: the real vCPUs, memory and GPUs of each provider's catalogue.

The node pools are made through the real drivers (google-cloud-container, boto3, pydo) and the Nodes are read
through lightkube with the drivers' own credentials, as the substrate reads them.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.resources.core_v1 import Node

from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import Accelerators, ClusterSpec, ClusterStatus, NodePoolSpec, NodePoolStatus
from better_compute.testing.cloud import Cloud
from better_compute.vps.provider import ProviderAccount

EKS_CONFIG = {
    "region": "us-east-1",
    "zones": ["us-east-1a", "us-east-1b"],
    "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
    "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
    "eksSubnetIds": ["subnet-0000000000000000a", "subnet-0000000000000000b"],
}

SHAPES: dict[str, tuple[dict[str, Any], str, NodePoolSpec, tuple[str, str, str]]] = {
    "gcp": (
        {"projectId": "my-project"},
        "us-central1-a",
        NodePoolSpec("h100", "a3-highgpu-8g", 1, accelerators=Accelerators("nvidia-h100-80gb", 8)),
        ("208", f"{1872 * 1024}Mi", "8"),
    ),
    "aws": (
        EKS_CONFIG,
        "us-east-1",
        NodePoolSpec("h100", "p5.48xlarge", 1),
        ("192", f"{2048 * 1024}Mi", "8"),
    ),
    "digitalocean": (
        {"token": "secret://tenant_1/doks", "regions": ["tor1"]},
        "tor1",
        NodePoolSpec("h100", "gpu-h100x8-640gb", 1),
        ("160", f"{1920 * 1024}Mi", "8"),
    ),
}


@pytest.mark.parametrize("provider_name", sorted(SHAPES))
async def test_a_gpu_node_has_its_machine_types_cpu_memory_and_gpus(provider_name: str) -> None:
    config, location, spec, (cpu, memory, gpus) = SHAPES[provider_name]
    async with Cloud() as cloud:

        async def resolve(reference: str) -> str:
            return cloud.doks_token

        (provider,) = [p for p in cloud.providers() if p.name == provider_name]
        driver = provider.kubernetes
        assert driver is not None
        account = ProviderAccount("k8s", provider_name, "tenant_1", config, resolve_secret=resolve)
        cluster = await driver.ensure_cluster(account, ClusterSpec(name="bc-shapes", location=location))
        for _ in range(40):
            state = await driver.get_cluster(account, cluster.cluster_id)
            if state is not None and state.status == ClusterStatus.READY:
                break
            await cloud.advance(30)
        await driver.ensure_node_pool(account, cluster.cluster_id, spec)
        for _ in range(40):
            pool = await driver.get_node_pool(account, cluster.cluster_id, spec.name)
            if pool is not None and pool.status == NodePoolStatus.READY:
                break
            await cloud.advance(30)

        client = kube_client(await driver.credentials(account, cluster.cluster_id))
        try:
            nodes = [n async for n in client.list(Node, labels={"node.kubernetes.io/instance-type": spec.machine_type})]
        finally:
            await client.close()
        assert nodes
        for node in nodes:
            assert node.status is not None and node.status.capacity is not None
            capacity = node.status.capacity
            assert (capacity["cpu"], capacity["memory"]) == (cpu, memory)
            assert node.metadata is not None and node.metadata.name is not None
            # the GPUs are the machine's; `nvidia.com/gpu` is what a device plugin advertises of them
            (hardware,) = [g for c in cloud.kube.clusters.values() if (g := c.kubelet.gpus(node.metadata.name))]
            assert str(hardware.count) == gpus
