"""What the simulated AWS world holds before anyone calls it: instance types, subnets,
Kubernetes versions, the known test identity, and how long things take.

All of it is data, so a test reads the same table the emulator serves.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACCESS_POLICIES",
    "ADMIN_POLICY_ARN",
    "DEFAULT_SUBNETS",
    "DEFAULT_VERSION",
    "INSTANCE_TYPES",
    "KUBERNETES_VERSIONS",
    "TEST_ACCESS_KEY_ID",
    "TEST_ACCOUNT_ID",
    "TEST_PRINCIPAL_ARN",
    "TEST_SECRET_ACCESS_KEY",
    "GpuSpec",
    "InstanceType",
    "Timings",
]

TEST_ACCOUNT_ID = "111111111111"
TEST_ACCESS_KEY_ID = "AKIAEMULATOREKS00001"
TEST_SECRET_ACCESS_KEY = "emulator-secret-access-key-0000000000001"  # a well-known test value, not a secret
TEST_PRINCIPAL_ARN = f"arn:aws:iam::{TEST_ACCOUNT_ID}:user/better-compute"

ADMIN_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"

ACCESS_POLICIES: dict[str, str] = {
    # name -> ARN: the access policies AWS manages, as ListAccessPolicies names them.
    name: f"arn:aws:eks::aws:cluster-access-policy/{name}"
    for name in (
        "AmazonEKSAdminPolicy",
        "AmazonEKSAdminViewPolicy",
        "AmazonEKSAutoNodePolicy",
        "AmazonEKSBlockStoragePolicy",
        "AmazonEKSClusterAdminPolicy",
        "AmazonEKSComputePolicy",
        "AmazonEKSEditPolicy",
        "AmazonEKSLoadBalancingPolicy",
        "AmazonEKSNetworkingPolicy",
        "AmazonEKSViewPolicy",
    )
}

KUBERNETES_VERSIONS: dict[str, str] = {
    # EKS minor version -> the patch version its API server reports.
    "1.29": "1.29.10",
    "1.30": "1.30.6",
    "1.31": "1.31.2",
    "1.32": "1.32.0",
}
DEFAULT_VERSION = "1.31"


@dataclass(frozen=True)
class GpuSpec:
    name: str
    manufacturer: str
    count: int
    memory_mib: int


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_mib: int
    gpu: GpuSpec | None = None


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("p5.48xlarge", 192, 2_097_152, GpuSpec("H100", "NVIDIA", 8, 81_920)),
        InstanceType("p5e.48xlarge", 192, 2_097_152, GpuSpec("H200", "NVIDIA", 8, 144_384)),
        InstanceType("p4d.24xlarge", 96, 1_179_648, GpuSpec("A100", "NVIDIA", 8, 40_960)),
        InstanceType("g6.xlarge", 4, 16_384, GpuSpec("L4", "NVIDIA", 1, 22_888)),
        InstanceType("g5.xlarge", 4, 16_384, GpuSpec("A10G", "NVIDIA", 1, 24_576)),
        InstanceType("m7i.large", 2, 8_192),
        InstanceType("m7i.xlarge", 4, 16_384),
    )
}

DEFAULT_SUBNETS: dict[str, str] = {
    # subnet id -> Availability Zone; the spec's example account uses the first two.
    "subnet-0000000000000000a": "us-east-1a",
    "subnet-0000000000000000b": "us-east-1b",
    "subnet-0000000000000000c": "us-east-1c",
    "subnet-0000000000000001a": "us-west-2a",
    "subnet-0000000000000001b": "us-west-2b",
}


@dataclass(frozen=True)
class Timings:
    """Simulated seconds each provider step takes (real EKS takes minutes)."""

    cluster_create: float = 480.0
    cluster_delete: float = 240.0
    cluster_upgrade: float = 600.0
    nodegroup_create: float = 180.0
    nodegroup_update: float = 90.0
    nodegroup_delete: float = 120.0
    spot_replacement: float = 120.0
    instance_termination: float = 30.0
    """From TerminateInstanceInAutoScalingGroup until the instance (and its Node) is gone."""
    instance_launch: float = 120.0
    """From an instance gone without decrement until the Auto Scaling group's replacement registers."""
