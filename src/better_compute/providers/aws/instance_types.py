"""What an EC2 instance type is (its GPUs, its vCPUs), read once per type with DescribeInstanceTypes.

The GPUs say which pool model a flavor serves; the vCPUs are what an instance counts against
EC2's per-family vCPU quotas (quota.py). Both come from one answer, kept for the driver's life:
an instance type never changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from better_compute.kubernetes.provider import GpuInfo
from better_compute.providers.aws.clients import AwsClients
from better_compute.providers.aws.vocabulary import accelerator_type, gpu_model

__all__ = ["InstanceType", "InstanceTypes"]


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    gpus: GpuInfo | None


class InstanceTypes:
    """DescribeInstanceTypes, cached by type name."""

    def __init__(self, clients: AwsClients) -> None:
        self._aws = clients
        self._known: dict[str, InstanceType] = {}

    async def describe(self, region: str, name: str) -> InstanceType:
        if name not in self._known:
            answer = await self._aws.call(
                "DescribeInstanceTypes", "ec2", region, lambda ec2: ec2.describe_instance_types(InstanceTypes=[name])
            )
            vcpus, info = 0, None
            for item in answer.get("InstanceTypes", []):
                vcpus = int((item.get("VCpuInfo") or {}).get("DefaultVCpus", 0))
                for gpu in (item.get("GpuInfo") or {}).get("Gpus", []):
                    info = GpuInfo(
                        model=gpu_model(gpu["Name"]),
                        count=int(gpu["Count"]),
                        accelerator_type=accelerator_type(gpu["Manufacturer"], gpu["Name"]),
                    )
            self._known[name] = InstanceType(name, vcpus, info)
        return self._known[name]
