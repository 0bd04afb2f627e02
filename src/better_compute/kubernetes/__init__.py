"""The kubernetes module: managed clusters and GPU pool substrates.

from better_compute.kubernetes import kubernetes, SubstrateConfig
"""

from better_compute.kubernetes.agent import SubstrateAgent, SubstrateConfig
from better_compute.kubernetes.module import KubernetesModule, kubernetes

__all__ = ["KubernetesModule", "SubstrateAgent", "SubstrateConfig", "kubernetes"]
