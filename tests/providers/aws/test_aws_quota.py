"""EKS' quota: EC2's vCPU quota per instance family from Service Quotas (boto3 `service-quotas`, JSON 1.1),
with the Region's usage from DescribeInstances (boto3 `ec2`, query/XML), against the EKS emulator."""

from __future__ import annotations

import pytest
from test_aws_machines import two_nodes

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import QuotaNeed
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator
from better_compute.vps.provider import ProviderAccount


async def test_each_instance_family_counts_its_vcpus_against_its_quota(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    await two_nodes(eks, driver, account, clock)  # two g6.xlarge (4 vCPUs each) run
    eks.quotas.set("L-417A185B", 384)
    eks.quotas.set("L-DB2E81BA", 16)
    eks.quotas.run_elsewhere("p5.48xlarge", 1)
    needs = (
        QuotaNeed("p5.48xlarge", 2),
        QuotaNeed("g6.xlarge", 2),
        QuotaNeed("g6.xlarge", 3, spot=True),
        QuotaNeed("m7i.large", -1),
    )

    standard, g_spot, p, g = await driver.quotas(account, "us-east-1", needs)

    assert (p.metric, p.name, p.unit, p.scope) == ("L-417A185B", "Running On-Demand P instances", "vCPUs", "us-east-1")
    assert (p.limit, p.usage, p.adds, p.exceeded) == (384, 192, 384, True), "one p5 runs elsewhere: 192 + 384 > 384"
    assert (g.metric, g.usage, g.adds, g.exceeded) == ("L-DB2E81BA", 8, 8, False), "8 + 8 fits 16 exactly"
    assert (g_spot.metric, g_spot.name, g_spot.adds) == ("L-3819A6DF", "All G and VT Spot Instance Requests", 12)
    assert (standard.metric, standard.adds, standard.exceeded) == ("L-1216C47A", -2, False), "fewer is never over"


async def test_an_instance_family_without_a_quota_here_asks_nothing(
    driver: EksKubernetes, account: ProviderAccount
) -> None:
    assert await driver.quotas(account, "us-east-1", ()) == ()


async def test_a_caller_service_quotas_refuses_gets_permission_denied(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    eks.quotas.denied = True
    with pytest.raises(ComputeError) as caught:
        await driver.quotas(account, "us-east-1", (QuotaNeed("p5.48xlarge", 1),))
    assert caught.value.code is ErrorCode.PERMISSION_DENIED
    assert "not authorized to perform: servicequotas:GetServiceQuota" in str(caught.value)
