"""The EKS emulator: EKS (rest-json), STS and EC2 (query) on one loopback port, each
cluster backed by a `KubeCluster` of the Kubernetes API emulator."""

from better_compute.testing.eks.catalog import (
    ADMIN_POLICY_ARN,
    INSTANCE_TYPES,
    TEST_ACCESS_KEY_ID,
    TEST_ACCOUNT_ID,
    TEST_PRINCIPAL_ARN,
    TEST_SECRET_ACCESS_KEY,
    Timings,
)
from better_compute.testing.eks.emulator import EksEmulator, Identity
from better_compute.testing.eks.faults import EksFaults

__all__ = [
    "ADMIN_POLICY_ARN",
    "INSTANCE_TYPES",
    "TEST_ACCESS_KEY_ID",
    "TEST_ACCOUNT_ID",
    "TEST_PRINCIPAL_ARN",
    "TEST_SECRET_ACCESS_KEY",
    "EksEmulator",
    "EksFaults",
    "Identity",
    "Timings",
]
