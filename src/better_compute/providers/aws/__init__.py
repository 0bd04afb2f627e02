"""The AWS provider: EKS clusters and managed node groups through boto3.

    aws_provider()                                       # boto3's default credential chain
    aws_provider(endpoint=emulator.url, credentials=AwsCredentials(key, secret), clock=clock)

Account config keys (the spec's EKS example): `region`, `zones`, `eksClusterRoleArn`,
`eksNodeRoleArn`, `eksSubnetIds`.
"""

from __future__ import annotations

from better_compute.core.clock import Clock, SystemClock
from better_compute.providers.aws.account import EksAccountConfig
from better_compute.providers.aws.clients import AwsClients, AwsCredentials
from better_compute.providers.aws.driver import EksKubernetes
from better_compute.providers.aws.vocabulary import VOCABULARY
from better_compute.vps.provider import ProviderImpl

__all__ = ["VOCABULARY", "AwsCredentials", "EksAccountConfig", "EksKubernetes", "aws_provider"]


def aws_provider(
    *,
    endpoint: str | None = None,
    credentials: AwsCredentials | None = None,
    max_workers: int = 8,
    clock: Clock | None = None,
) -> ProviderImpl:
    """The `aws` provider definition. `endpoint` overrides every AWS endpoint (the EKS
    emulator serves EKS, STS and EC2 on one URL); `clock` signs cluster tokens and
    dates their expiry (the system clock by default)."""
    clients = AwsClients(endpoint=endpoint, credentials=credentials, max_workers=max_workers)
    return ProviderImpl(
        name="aws", kubernetes=EksKubernetes(clients, clock or SystemClock()), account_config=EksAccountConfig
    )
