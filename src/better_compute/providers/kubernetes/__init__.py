"""The provider-neutral part of the substrate: what runs bcd on any managed cluster.

from better_compute.providers.kubernetes import kubernetes_substrate_agent
agent = kubernetes_substrate_agent(image=..., gateway_url="wss://...", pins=[...], control_plane_url="https://...")
"""

from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.agent import substrate_agent as kubernetes_substrate_agent

__all__ = ["SubstrateAgent", "kubernetes_substrate_agent"]
