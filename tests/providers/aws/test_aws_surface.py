"""The public surface of the AWS provider and the EKS emulator is decided, not accidental."""

from __future__ import annotations

import better_compute.providers.aws as aws
import better_compute.testing.eks as eks
from better_compute.kubernetes.provider import ProviderKubernetes


def test_the_aws_provider_exports() -> None:
    assert sorted(aws.__all__) == ["AwsCredentials", "EksAccountConfig", "EksKubernetes", "VOCABULARY", "aws_provider"]
    assert all(hasattr(aws, name) for name in aws.__all__)
    impl = aws.aws_provider(endpoint="http://127.0.0.1:1", credentials=aws.AwsCredentials("AKIA", "secret"))
    assert impl.name == "aws"
    assert isinstance(impl.kubernetes, ProviderKubernetes)
    assert impl.kubernetes.vocabulary.cluster_location == "region"
    assert impl.kubernetes.vocabulary.nodes_per_zone
    assert "secret" not in repr(aws.AwsCredentials("AKIA", "secret"))
    assert isinstance(impl.kubernetes, aws.EksKubernetes)
    impl.kubernetes.close()


def test_the_eks_emulator_exports() -> None:
    assert sorted(eks.__all__) == sorted(
        [
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
    )
    assert all(hasattr(eks, name) for name in eks.__all__)
