"""EC2 Auto Scaling (`autoscaling`, API version 2011-01-01): the query protocol, answered in XML.

A managed node group's instances belong to the Auto Scaling group EKS made for it
(`resources.autoScalingGroups` of the node group). DescribeAutoScalingGroups reads it (sizes and
instances with their LifecycleState); TerminateInstanceInAutoScalingGroup terminates one instance,
with `ShouldDecrementDesiredCapacity` lowering the desired capacity (which EKS reports as the node
group's desiredSize) or, without it, the group launching a replacement. Decrementing below the
group's minimum size is refused, as Auto Scaling refuses it. Errors are the query protocol's
`<ErrorResponse>` with Auto Scaling's codes (ValidationError, ScalingActivityInProgress).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from xml.sax.saxutils import escape

from better_compute.testing.eks.catalog import TEST_ACCOUNT_ID
from better_compute.testing.eks.errors import AwsError
from better_compute.testing.eks.model import Cluster, Nodegroup
from better_compute.testing.eks.query_api import indexed
from better_compute.testing.eks.world import World

__all__ = ["autoscaling_error", "autoscaling_response"]

_NS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _wrap(action: str, result: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{_NS}"><{action}Result>{result}'
        f"</{action}Result><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )


def _instance_xml(group: Nodegroup, instance_id: str, zone: str, state: str) -> str:
    return (
        f"<member><InstanceId>{instance_id}</InstanceId><InstanceType>{escape(group.instance_type)}</InstanceType>"
        f"<AvailabilityZone>{escape(zone)}</AvailabilityZone><LifecycleState>{state}</LifecycleState>"
        "<HealthStatus>Healthy</HealthStatus><ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>"
    )


def _group_xml(cluster: Cluster, group: Nodegroup) -> str:
    name = group.auto_scaling_group
    arn = (
        f"arn:aws:autoscaling:{cluster.region}:{TEST_ACCOUNT_ID}:autoScalingGroup:"
        f"{uuid.uuid5(uuid.NAMESPACE_URL, group.arn)}:autoScalingGroupName/{name}"
    )
    instances = "".join(
        _instance_xml(group, instance_id, group.nodes[node], "InService")
        for instance_id, node in group.instances.items()
    ) + "".join(
        _instance_xml(group, instance_id, zone, "Terminating") for instance_id, (_, zone) in group.terminating.items()
    )
    zones = "".join(f"<member>{escape(z)}</member>" for z in group.zones)
    return (
        f"<member><AutoScalingGroupName>{escape(name)}</AutoScalingGroupName>"
        f"<AutoScalingGroupARN>{escape(arn)}</AutoScalingGroupARN>"
        f"<MinSize>{group.min_size}</MinSize><MaxSize>{group.max_size}</MaxSize>"
        f"<DesiredCapacity>{group.desired_size}</DesiredCapacity><DefaultCooldown>300</DefaultCooldown>"
        f"<AvailabilityZones>{zones}</AvailabilityZones><HealthCheckType>EC2</HealthCheckType>"
        f"<CreatedTime>{_ts(group.created_at)}</CreatedTime><Instances>{instances}</Instances>"
        f"<VPCZoneIdentifier>{escape(','.join(group.subnets))}</VPCZoneIdentifier></member>"
    )


def _describe(world: World, form: Mapping[str, str], region: str) -> str:
    names = indexed(form, "AutoScalingGroupNames.member")
    found = []
    for cluster in world.clusters.values():
        for group in cluster.nodegroups.values():
            if cluster.region == region and (not names or group.auto_scaling_group in names):
                found.append(_group_xml(cluster, group))
    return _wrap("DescribeAutoScalingGroups", f"<AutoScalingGroups>{''.join(found)}</AutoScalingGroups>")


def _terminate(world: World, form: Mapping[str, str], region: str) -> str:
    instance_id = form.get("InstanceId", "")
    decrement = form.get("ShouldDecrementDesiredCapacity", "").lower()
    if decrement not in ("true", "false"):
        raise AwsError("ValidationError", "ShouldDecrementDesiredCapacity is required: true or false")
    owner = world.group_of_instance(region, instance_id)
    if owner is None:
        raise AwsError(
            "ValidationError", f"Instance Id not found - No managed instance found for instance ID: {instance_id}"
        )
    cluster, group = owner
    if decrement == "true" and group.desired_size - 1 < group.min_size:
        raise AwsError(
            "ValidationError",
            f"Currently, desiredSize equals minSize ({group.min_size}). Terminating instance without replacement "
            "will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false "
            "or lower group's min size.",
        )
    if group.status in ("CREATING", "DELETING"):
        raise AwsError(
            "ScalingActivityInProgress", f"Scaling activity in progress for group {group.auto_scaling_group}"
        )
    world.terminate_instance(cluster, group, instance_id, decrement=decrement == "true")
    now = _ts(world.clock.now())
    cause = f"At {now} instance {instance_id} was taken out of service in response to a user request"
    if decrement == "true":
        cause += f", shrinking the capacity from {group.desired_size + 1} to {group.desired_size}"
    details = json.dumps({"Subnet ID": group.subnets[0]} if group.subnets else {})
    activity = (
        f"<Activity><ActivityId>{uuid.uuid4()}</ActivityId>"
        f"<AutoScalingGroupName>{escape(group.auto_scaling_group)}</AutoScalingGroupName>"
        f"<Description>Terminating EC2 instance: {instance_id}</Description><Cause>{escape(cause)}.</Cause>"
        f"<StartTime>{now}</StartTime><StatusCode>InProgress</StatusCode><Progress>0</Progress>"
        f"<Details>{escape(details)}</Details></Activity>"
    )
    return _wrap("TerminateInstanceInAutoScalingGroup", activity)


def autoscaling_response(world: World, action: str, form: Mapping[str, str], region: str) -> str:
    if action == "DescribeAutoScalingGroups":
        return _describe(world, form, region)
    if action == "TerminateInstanceInAutoScalingGroup":
        return _terminate(world, form, region)
    raise AwsError("InvalidAction", f"The action {action} is not valid for this web service.")


def autoscaling_error(error: AwsError) -> str:
    kind = "Receiver" if error.status >= 500 else "Sender"
    return (
        f'<ErrorResponse xmlns="{_NS}"><Error><Type>{kind}</Type>'
        f"<Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message></Error>"
        f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
