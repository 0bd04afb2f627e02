"""EC2's vCPU quotas per instance family: the limit from Service Quotas, the usage from what runs.

EC2 counts running instances per Region in vCPUs against one quota per family: P instances
(L-417A185B on demand, L-7212CCBC Spot), G and VT (L-DB2E81BA, L-3819A6DF), and the Standard
families A, C, D, H, I, M, R, T, Z (L-1216C47A, L-34B43A08). GetServiceQuota (boto3
`service-quotas`) answers a quota's `Value`; its usage is the vCPUs of the Region's pending and
running instances of those families (DescribeInstances; `InstanceLifecycle` is `spot` for Spot
ones), whoever launched them. An instance type of another family (Inf, Trn, DL, F, X, high
memory) is asked about no quota here.
"""

from __future__ import annotations

import re
from typing import Any

from better_compute.kubernetes.provider import Quota, QuotaNeed
from better_compute.providers.aws.clients import AwsClients
from better_compute.providers.aws.instance_types import InstanceTypes

__all__ = ["FAMILY_QUOTAS", "quota_code", "vcpu_quotas"]

FAMILY_QUOTAS: dict[str, tuple[str, str]] = {
    "p": ("L-417A185B", "L-7212CCBC"),
    "g": ("L-DB2E81BA", "L-3819A6DF"),
    "vt": ("L-DB2E81BA", "L-3819A6DF"),
    **{letter: ("L-1216C47A", "L-34B43A08") for letter in "acdhimrtz"},
}
"""An instance type's family letters -> its (On-Demand, Spot) vCPU quota code."""

_FAMILY = re.compile(r"^([a-z]+?)\d")


def quota_code(instance_type: str, *, spot: bool) -> str | None:
    """The vCPU quota an instance type counts against (`p5.48xlarge` -> L-417A185B), or None."""
    match = _FAMILY.match(instance_type)
    codes = FAMILY_QUOTAS.get(match[1]) if match else None
    if codes is None:
        return None
    return codes[1] if spot else codes[0]


async def _usage(aws: AwsClients, types: InstanceTypes, region: str) -> dict[str, float]:
    def running(ec2: Any) -> list[tuple[str, bool]]:
        found = []
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )
        for page in pages:
            for reservation in page.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    found.append((str(instance["InstanceType"]), instance.get("InstanceLifecycle") == "spot"))
        return found

    used: dict[str, float] = {}
    for instance_type, spot in await aws.call("DescribeInstances", "ec2", region, running):
        code = quota_code(instance_type, spot=spot)
        if code is not None:
            used[code] = used.get(code, 0.0) + (await types.describe(region, instance_type)).vcpus
    return used


async def vcpu_quotas(
    aws: AwsClients, types: InstanceTypes, region: str, needs: tuple[QuotaNeed, ...]
) -> tuple[Quota, ...]:
    """Each vCPU quota the needs count against, with its limit, the Region's usage and what they add."""
    adds: dict[str, float] = {}
    for need in needs:
        code = quota_code(need.machine_type, spot=need.spot)
        if code is not None:
            adds[code] = adds.get(code, 0.0) + need.count * (await types.describe(region, need.machine_type)).vcpus
    if not adds:
        return ()
    limits: dict[str, tuple[str, float]] = {}
    for code in sorted(adds):

        def read(quotas: Any, code: str = code) -> Any:
            return quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)

        answer = await aws.call("GetServiceQuota", "service-quotas", region, read)
        limits[code] = (str(answer["Quota"]["QuotaName"]), float(answer["Quota"]["Value"]))
    used = await _usage(aws, types, region)
    return tuple(
        Quota(code, limits[code][0], "vCPUs", limits[code][1], used.get(code, 0.0), adds[code], scope=region)
        for code in sorted(adds)
    )
