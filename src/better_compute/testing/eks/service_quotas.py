"""Service Quotas' GetServiceQuota for EC2's vCPU quotas (JSON 1.1 protocol), and EC2's DescribeInstances.

EC2 caps running instances per Region in vCPUs per instance family: "Running On-Demand P
instances" (L-417A185B), "Running On-Demand G and VT instances" (L-DB2E81BA), their Spot
counterparts ("All P Spot Instance Requests", L-7212CCBC; "All G and VT Spot Instance Requests",
L-3819A6DF), and the Standard families'. GetServiceQuota answers the limit (`Quota.Value`); the
usage is what runs, which DescribeInstances lists (`instanceLifecycle` is `spot` for a Spot
instance). The instances listed are the node groups' (each Node's instance) and those a test says
run outside them. A test sets the limits and that outside usage:

    eks.quotas.set("L-417A185B", 384)
    eks.quotas.run_elsewhere("p5.48xlarge", 1)

An unknown quota code is NoSuchResourceException; `quotas.denied` answers AccessDeniedException,
as Service Quotas does for a caller without `servicequotas:GetServiceQuota`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from better_compute.testing.eks.errors import AwsError
from better_compute.testing.eks.model import Cluster

__all__ = ["EC2_QUOTAS", "ServiceQuotas"]

EC2_QUOTAS: dict[str, str] = {
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-417A185B": "Running On-Demand P instances",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-7212CCBC": "All P Spot Instance Requests",
}
DEFAULT_VCPUS = 1536.0
_EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"


@dataclass
class ServiceQuotas:
    """The account's EC2 vCPU quotas per Region, and instances running outside the emulator's node groups."""

    values: dict[tuple[str, str], float] = field(default_factory=dict)
    elsewhere: list[tuple[str, str, str, bool]] = field(default_factory=list)
    """(region, instance id, instance type, spot)."""
    denied: bool = False

    def set(self, code: str, value: float, region: str = "us-east-1") -> None:
        self.values[(region, code)] = value

    def run_elsewhere(
        self, instance_type: str, count: int = 1, *, spot: bool = False, region: str = "us-east-1"
    ) -> None:
        for _ in range(count):
            self.elsewhere.append((region, f"i-0e15e{len(self.elsewhere) + 1:012x}", instance_type, spot))

    def get_service_quota(self, body: Mapping[str, Any], region: str, account_id: str, caller: str) -> dict[str, Any]:
        if self.denied:
            raise AwsError(
                "AccessDeniedException",
                f"User: {caller} is not authorized to perform: servicequotas:GetServiceQuota",
            )
        service, code = body.get("ServiceCode"), body.get("QuotaCode")
        if service != "ec2" or code not in EC2_QUOTAS:
            raise AwsError(
                "NoSuchResourceException", "The request failed because the specified service quota does not exist."
            )
        return {
            "Quota": {
                "ServiceCode": "ec2",
                "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                "QuotaArn": f"arn:aws:servicequotas:{region}:{account_id}:ec2/{code}",
                "QuotaCode": code,
                "QuotaName": EC2_QUOTAS[code],
                "Value": self.values.get((region, code), DEFAULT_VCPUS),
                "Unit": "None",
                "Adjustable": True,
                "GlobalQuota": False,
                "UsageMetric": {
                    "MetricNamespace": "AWS/Usage",
                    "MetricName": "ResourceCount",
                    "MetricDimensions": {"Resource": "vCPU", "Service": "EC2", "Type": "Resource"},
                    "MetricStatisticRecommendation": "Maximum",
                },
            }
        }

    def describe_instances(self, form: Mapping[str, str], region: str, clusters: Iterable[Cluster]) -> str:
        """DescribeInstances: every running instance of the Region, in one page (no NextToken)."""
        states = [v for k, v in form.items() if k.startswith("Filter.") and ".Value." in k and _names_state(form, k)]
        running: list[tuple[str, str, bool]] = [
            (instance, group.instance_type, group.capacity_type == "SPOT")
            for cluster in clusters
            if cluster.region == region
            for group in cluster.nodegroups.values()
            for instance in group.instances
        ]
        running += [(i, t, spot) for r, i, t, spot in self.elsewhere if r == region]
        if states and "running" not in states:
            running = []
        items = "".join(
            f"<item><instanceId>{escape(i)}</instanceId><instanceType>{escape(t)}</instanceType>"
            "<instanceState><code>16</code><name>running</name></instanceState>"
            + ("<instanceLifecycle>spot</instanceLifecycle>" if spot else "")
            + "</item>"
            for i, t, spot in running
        )
        reservation = (
            f"<item><reservationId>r-{uuid.uuid4().hex[:17]}</reservationId><instancesSet>{items}</instancesSet></item>"
            if running
            else ""
        )
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstancesResponse xmlns="{_EC2_NS}">'
            f"<requestId>{uuid.uuid4()}</requestId><reservationSet>{reservation}</reservationSet>"
            "</DescribeInstancesResponse>"
        )


def _names_state(form: Mapping[str, str], value_key: str) -> bool:
    """Whether `Filter.N.Value.M` belongs to a filter named instance-state-name."""
    index = value_key.split(".")[1]
    return form.get(f"Filter.{index}.Name") == "instance-state-name"
