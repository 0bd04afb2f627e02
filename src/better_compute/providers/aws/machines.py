"""Named instances out of a managed node group, through its EC2 Auto Scaling group.

An EKS Node's `spec.providerID` is `aws:///<zone>/<instance id>`. The node group's Auto Scaling
group (`resources.autoScalingGroups`) is read once (DescribeAutoScalingGroups): instances that are
no InService members any more (terminated, or already Terminating after an earlier call) are
skipped. Each of the others is terminated with TerminateInstanceInAutoScalingGroup:
`ShouldDecrementDesiredCapacity` false lets the group launch a replacement (the count stays), true
lowers the desired capacity, which EKS reports as the node group's desiredSize.

Auto Scaling refuses to decrement below the group's minimum size. A fixed-size node group has
minSize = desiredSize, so its minimum is first lowered by as many through EKS
(UpdateNodegroupConfig, `minSize` alone: the node group's own door, never the Auto Scaling group's);
an autoscaled one keeps its bounds, and a removal below its minimum is refused (INVALID_STATE).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.providers.aws.clients import AwsClients

__all__ = ["instance_of", "remove_instances"]

_PROVIDER_ID = re.compile(r"aws:///(?P<zone>[a-z0-9-]+)/(?P<instance>i-[0-9a-f]+)")
_MEMBER = frozenset({"Pending", "Pending:Wait", "Pending:Proceed", "InService"})


def instance_of(provider_id: str) -> str:
    """The EC2 instance id of an EKS Node's providerID."""
    match = _PROVIDER_ID.fullmatch(provider_id)
    if match is None:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"not an EKS Node's providerID (aws:///<zone>/<instance id>): {provider_id!r}"
        )
    return match["instance"]


def _fixed(scaling: Mapping[str, Any]) -> bool:
    low, high, want = scaling.get("minSize", 0), scaling.get("maxSize", 1), scaling.get("desiredSize", 0)
    return bool(low == want and high == max(want, 1))


async def remove_instances(
    aws: AwsClients,
    region: str,
    cluster: str,
    group: Mapping[str, Any],
    provider_ids: tuple[str, ...],
    *,
    replace: bool,
) -> None:
    """Terminate the node group's instances behind `provider_ids` (see the module docstring)."""
    wanted = list(dict.fromkeys(instance_of(p) for p in provider_ids))
    name = group["nodegroupName"]
    asgs = [a["name"] for a in (group.get("resources") or {}).get("autoScalingGroups") or []]
    if not asgs:
        raise ComputeError(
            ErrorCode.INVALID_STATE, f"node group {name} of {region}/{cluster} has no Auto Scaling group yet"
        )
    answer = await aws.call(
        "DescribeAutoScalingGroups",
        "autoscaling",
        region,
        lambda a: a.describe_auto_scaling_groups(AutoScalingGroupNames=asgs),
    )
    members = {
        i["InstanceId"]
        for g in answer.get("AutoScalingGroups", [])
        for i in g.get("Instances", [])
        if i.get("LifecycleState") in _MEMBER
    }
    chosen = [i for i in wanted if i in members]
    if not chosen:
        return
    scaling = group.get("scalingConfig") or {}
    lowered = int(scaling.get("desiredSize", 0)) - len(chosen)
    if not replace and lowered < int(scaling.get("minSize", 0)) and _fixed(scaling):
        await aws.call(
            "UpdateNodegroupConfig",
            "eks",
            region,
            lambda eks: eks.update_nodegroup_config(
                clusterName=cluster, nodegroupName=name, scalingConfig={"minSize": max(lowered, 0)}
            ),
        )
    for instance in chosen:
        await aws.call("TerminateInstanceInAutoScalingGroup", "autoscaling", region, _terminate(instance, replace))


def _terminate(instance: str, replace: bool) -> Callable[[Any], object]:
    def call(autoscaling: Any) -> object:
        return autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=instance, ShouldDecrementDesiredCapacity=not replace
        )

    return call
