"""An emulator of the Kubernetes API server and a kubelet simulator, for tests.

    async with KubeApiServer(clock) as server:
        cluster = server.add_cluster("c1")
        token = cluster.issue_token("admin", ttl_seconds=600)
        await cluster.kubelet.add_node("n1", labels={"pool": "gpu"}, capacity={"nvidia.com/gpu": "8"})
        # point lightkube or kubectl at cluster.endpoint with cluster.ca_data and the token

See docs/testing.md for the whole surface.
"""

from better_compute.testing.kube.auth import Authenticator, TokenReview
from better_compute.testing.kube.cluster import KubeCluster
from better_compute.testing.kube.kubelet import KubeletSimulator
from better_compute.testing.kube.rbac import Attributes, Authorizer
from better_compute.testing.kube.runtime import ContainerRun, NodeRun, PodRun, PodRuntime
from better_compute.testing.kube.server import KubeApiServer

__all__ = [
    "Attributes",
    "Authenticator",
    "Authorizer",
    "ContainerRun",
    "KubeApiServer",
    "KubeCluster",
    "KubeletSimulator",
    "NodeRun",
    "PodRun",
    "PodRuntime",
    "TokenReview",
]
