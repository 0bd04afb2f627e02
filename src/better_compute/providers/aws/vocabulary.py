"""What EKS calls places, shapes and counts, as data.

- Clusters are regional: `cluster.create.location` is a region (`us-east-1`); a zone
  (`us-east-1a`) is refused.
- A flavor's `nodes` counts per Availability Zone of the node group's subnets: the
  driver sends `scalingConfig.desiredSize = nodes x zones` (EKS's desiredSize is the
  node group's total, which its Auto Scaling group spreads evenly over those zones),
  and reads `desiredSize / zones` back. Two subnets in two zones double `nodes`.
- Node names are EC2 private DNS names (`ip-10-0-1-23.ec2.internal`).
- An instance type's GPUs come from EC2 DescribeInstanceTypes; the accelerator type
  is `<manufacturer>-<name>` in lower case (`nvidia-h100`).
"""

from __future__ import annotations

import re

from better_compute.kubernetes.provider import KubernetesVocabulary, TypicalDurations

__all__ = [
    "ACCOUNT_KEYS",
    "ADMIN_POLICY_ARN",
    "AMI_GPU",
    "AMI_STANDARD",
    "AUTHENTICATION_MODE",
    "REGION_PATTERN",
    "STS_PRESIGN_SECONDS",
    "TAINT_EFFECTS",
    "THROTTLE_RETRY_AFTER",
    "TOKEN_PREFIX",
    "VOCABULARY",
    "ZONE_PATTERN",
    "accelerator_type",
    "gpu_model",
]

VOCABULARY = KubernetesVocabulary(
    provider="aws",
    cluster_location="region",
    nodes_per_zone=True,
    zero_nodes=True,
    spot=True,
    zones_and_disk=True,
    node_naming="EC2 instance private DNS names (ip-10-0-1-23.ec2.internal); bcd reports the Node name it runs on",
    # EKS: a control plane in about 8 minutes, a managed node group in about 3, a scaling update in 1.5.
    durations=TypicalDurations(cluster_create=480.0, node_pool_create=180.0, node_pool_resize=90.0),
    node_pool_label="eks.amazonaws.com/nodegroup",
)

ACCOUNT_KEYS = ("region", "zones", "eksClusterRoleArn", "eksNodeRoleArn", "eksSubnetIds")
"""The provider account's config keys, exactly as the spec's EKS example writes them."""

REGION_PATTERN = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")
ZONE_PATTERN = re.compile(r"^([a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+)[a-z]$")

ADMIN_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
AUTHENTICATION_MODE = "API_AND_CONFIG_MAP"
"""Access entries for better-compute and the tenant, and the tenant's aws-auth ConfigMap still works."""

AMI_GPU = "AL2023_x86_64_NVIDIA"
AMI_STANDARD = "AL2023_x86_64_STANDARD"

TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}

TOKEN_PREFIX = "k8s-aws-v1."
STS_PRESIGN_SECONDS = 60
THROTTLE_RETRY_AFTER = 5.0
"""Seconds to wait after a throttled call when AWS names no Retry-After."""

_GPU_MODELS = {"H100": "H100", "H200": "H200", "A100": "A100", "L4": "L4", "A10G": "A10G", "T4": "T4", "L40S": "L40S"}


def accelerator_type(manufacturer: str, name: str) -> str:
    """`nvidia-h100` for EC2's {Manufacturer: NVIDIA, Name: H100}."""
    return f"{manufacturer}-{name}".lower().replace(" ", "-")


def gpu_model(name: str) -> str:
    """better-compute's model name for EC2's GPU name (they agree for NVIDIA's data-centre parts)."""
    return _GPU_MODELS.get(name, name.upper())
