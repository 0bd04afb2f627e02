"""EC2 and STS: the query protocol (form-encoded `Action=...`), answered in XML.

EC2 serves DescribeInstanceTypes (the GPUs of an instance type), DescribeSubnets
(which Availability Zone each subnet is in) and CreateLaunchTemplate (a name and
`LaunchTemplateData.UserData`, which a node group made with it boots with). STS serves GetCallerIdentity, both
SigV4-signed and as a presigned URL (what an EKS token carries).
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Mapping
from xml.sax.saxutils import escape

from better_compute.testing.eks.catalog import INSTANCE_TYPES, InstanceType
from better_compute.testing.eks.errors import AwsError
from better_compute.testing.eks.model import LaunchTemplate

__all__ = ["ec2_error", "ec2_response", "indexed", "sts_error", "sts_identity"]

_EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
_STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


def indexed(form: Mapping[str, str], prefix: str) -> list[str]:
    """`InstanceType.1=a&InstanceType.2=b` -> ["a", "b"], in index order."""
    found = []
    for key, value in form.items():
        match = re.fullmatch(re.escape(prefix) + r"\.(\d+)", key)
        if match:
            found.append((int(match[1]), value))
    return [v for _, v in sorted(found)]


def _instance_xml(t: InstanceType) -> str:
    gpu = ""
    if t.gpu is not None:
        g = t.gpu
        gpu = (
            "<gpuInfo><gpus><item>"
            f"<name>{escape(g.name)}</name><manufacturer>{escape(g.manufacturer)}</manufacturer><count>{g.count}</count>"
            f"<memoryInfo><sizeInMiB>{g.memory_mib}</sizeInMiB></memoryInfo>"
            f"</item></gpus><totalGpuMemoryInMiB>{g.memory_mib * g.count}</totalGpuMemoryInMiB></gpuInfo>"
        )
    return (
        f"<item><instanceType>{escape(t.name)}</instanceType><currentGeneration>true</currentGeneration>"
        f"<vCpuInfo><defaultVCpus>{t.vcpus}</defaultVCpus></vCpuInfo>"
        f"<memoryInfo><sizeInMiB>{t.memory_mib}</sizeInMiB></memoryInfo>{gpu}</item>"
    )


def ec2_response(
    action: str,
    form: Mapping[str, str],
    region: str,
    subnets: Mapping[str, str],
    launch_templates: dict[str, LaunchTemplate],
) -> str:
    request_id = uuid.uuid4()
    if action == "CreateLaunchTemplate":
        name = form.get("LaunchTemplateName", "")
        if not re.fullmatch(r"[a-zA-Z0-9()./_-]{3,128}", name):
            raise AwsError(
                "InvalidLaunchTemplateName.MalformedException", f"The launch template name '{name}' is invalid"
            )
        if any(t.name == name for t in launch_templates.values()):
            raise AwsError(
                "InvalidLaunchTemplateName.AlreadyExistsException",
                f"Launch template name already in use: {name}",
            )
        template = LaunchTemplate(f"lt-{secrets.token_hex(9)[:17]}", name, form.get("LaunchTemplateData.UserData", ""))
        launch_templates[template.id] = template
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateLaunchTemplateResponse xmlns="{_EC2_NS}">'
            f"<requestId>{request_id}</requestId><launchTemplate><launchTemplateId>{template.id}</launchTemplateId>"
            f"<launchTemplateName>{escape(name)}</launchTemplateName><defaultVersionNumber>1</defaultVersionNumber>"
            "<latestVersionNumber>1</latestVersionNumber></launchTemplate></CreateLaunchTemplateResponse>"
        )
    if action == "DescribeInstanceTypes":
        names = indexed(form, "InstanceType") or sorted(INSTANCE_TYPES)
        unknown = [n for n in names if n not in INSTANCE_TYPES]
        if unknown:
            raise AwsError(
                "InvalidInstanceType", f"The following supplied instance types do not exist: [{', '.join(unknown)}]"
            )
        items = "".join(_instance_xml(INSTANCE_TYPES[n]) for n in names)
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceTypesResponse xmlns="{_EC2_NS}">'
            f"<requestId>{request_id}</requestId><instanceTypeSet>{items}</instanceTypeSet>"
            "</DescribeInstanceTypesResponse>"
        )
    if action == "DescribeSubnets":
        ids = indexed(form, "SubnetId") or sorted(s for s, z in subnets.items() if z.startswith(region))
        missing = [s for s in ids if not subnets.get(s, "").startswith(region)]
        if missing:
            raise AwsError("InvalidSubnetID.NotFound", f"The subnet ID '{missing[0]}' does not exist")
        items = "".join(
            f"<item><subnetId>{escape(s)}</subnetId><availabilityZone>{escape(subnets[s])}</availabilityZone>"
            f"<state>available</state><vpcId>vpc-00000000000000001</vpcId>"
            f"<cidrBlock>10.0.{i * 16}.0/20</cidrBlock></item>"
            for i, s in enumerate(ids)
        )
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeSubnetsResponse xmlns="{_EC2_NS}">'
            f"<requestId>{request_id}</requestId><subnetSet>{items}</subnetSet></DescribeSubnetsResponse>"
        )
    raise AwsError("InvalidAction", f"The action {action} is not valid for this web service.")


def ec2_error(error: AwsError) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
        f"<Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message>"
        f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )


def sts_identity(principal_arn: str, account_id: str, user_id: str) -> str:
    return (
        f'<GetCallerIdentityResponse xmlns="{_STS_NS}"><GetCallerIdentityResult>'
        f"<Arn>{escape(principal_arn)}</Arn><UserId>{escape(user_id)}</UserId><Account>{account_id}</Account>"
        f"</GetCallerIdentityResult><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        "</GetCallerIdentityResponse>"
    )


def sts_error(error: AwsError) -> str:
    kind = "Receiver" if error.status >= 500 else "Sender"
    return (
        f'<ErrorResponse xmlns="{_STS_NS}"><Error><Type>{kind}</Type>'
        f"<Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message></Error>"
        f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
