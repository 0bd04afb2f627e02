"""The EKS emulator speaks EKS, EC2 and STS well enough for boto3, checks SigV4, and
moves clusters and node groups through EKS's statuses on the simulated clock."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from better_compute.core.clock import SimClock
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.testing.kube import KubeApiServer

SUBNETS = ["subnet-0000000000000000a", "subnet-0000000000000000b"]
NODE_ROLE = "arn:aws:iam::111111111111:role/eks-node"


@pytest.fixture
async def eks(clock: SimClock) -> AsyncIterator[EksEmulator]:
    async with KubeApiServer(clock) as kube, EksEmulator(clock, kube) as emulator:
        yield emulator


def client(eks: EksEmulator, service: str, *, secret: str | None = None) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=eks.url,
        region_name="us-east-1",
        aws_access_key_id=eks.access_key_id,
        aws_secret_access_key=secret or eks.secret_access_key,
        config=Config(retries={"total_max_attempts": 1}),
    )


async def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """boto3 blocks; the emulator runs on this loop, so the call goes to a thread."""
    return await asyncio.to_thread(fn, **kwargs)


async def error_of(fn: Callable[..., Any], **kwargs: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        await call(fn, **kwargs)
    return caught.value


async def active_cluster(eks: EksEmulator, clock: SimClock, api: Any, name: str = "c1") -> dict[str, Any]:
    await call(
        api.create_cluster,
        name=name,
        roleArn="arn:aws:iam::111111111111:role/eks-cluster",
        resourcesVpcConfig={"subnetIds": SUBNETS},
        accessConfig={"authenticationMode": "API_AND_CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": True},
    )
    clock.advance(Timings().cluster_create)
    await eks.settle()
    return (await call(api.describe_cluster, name=name))["cluster"]  # type: ignore[no-any-return]


async def test_a_cluster_is_creating_until_its_time_then_active_with_endpoint_and_ca(
    eks: EksEmulator, clock: SimClock
) -> None:
    api = client(eks, "eks")
    made = await call(
        api.create_cluster,
        name="c1",
        roleArn="arn:aws:iam::111111111111:role/eks-cluster",
        resourcesVpcConfig={"subnetIds": SUBNETS},
        version="1.30",
        clientRequestToken="tok-1",
    )
    assert made["cluster"]["status"] == "CREATING"
    assert made["cluster"]["arn"] == "arn:aws:eks:us-east-1:111111111111:cluster/c1"
    assert "endpoint" not in made["cluster"]
    clock.advance(Timings().cluster_create - 1)
    await eks.settle()
    assert (await call(api.describe_cluster, name="c1"))["cluster"]["status"] == "CREATING"
    clock.advance(1)
    await eks.settle()
    cluster = (await call(api.describe_cluster, name="c1"))["cluster"]
    assert cluster["status"] == "ACTIVE"
    assert cluster["endpoint"].startswith("https://127.0.0.1:")
    assert cluster["certificateAuthority"]["data"]
    assert cluster["version"] == "1.30"
    assert (await call(api.list_clusters))["clusters"] == ["c1"]
    again = await call(
        api.create_cluster,
        name="c1",
        roleArn="arn:aws:iam::111111111111:role/eks-cluster",
        resourcesVpcConfig={"subnetIds": SUBNETS},
        clientRequestToken="tok-1",
    )
    assert again["cluster"]["arn"] == cluster["arn"], "the same clientRequestToken answers the same cluster"
    clash = await error_of(
        api.create_cluster,
        name="c1",
        roleArn="arn:aws:iam::111111111111:role/eks-cluster",
        resourcesVpcConfig={"subnetIds": SUBNETS},
        clientRequestToken="tok-2",
    )
    assert clash.response["Error"]["Code"] == "ResourceInUseException"
    assert clash.response["ResponseMetadata"]["HTTPStatusCode"] == 409


async def test_boto3_parses_node_groups_updates_and_access_entries(eks: EksEmulator, clock: SimClock) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    group = (
        await call(
            api.create_nodegroup,
            clusterName="c1",
            nodegroupName="gpu",
            subnets=SUBNETS,
            nodeRole=NODE_ROLE,
            instanceTypes=["g6.xlarge"],
            amiType="AL2023_x86_64_NVIDIA",
            capacityType="SPOT",
            labels={"team": "ml"},
            taints=[{"key": "gpu", "value": "yes", "effect": "NO_SCHEDULE"}],
            scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 2},
            diskSize=100,
        )
    )["nodegroup"]
    assert group["status"] == "CREATING"
    assert group["createdAt"].tzinfo is not None
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    described = (await call(api.describe_nodegroup, clusterName="c1", nodegroupName="gpu"))["nodegroup"]
    assert described["status"] == "ACTIVE"
    assert described["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 2}
    assert described["capacityType"] == "SPOT"
    assert (await call(api.list_nodegroups, clusterName="c1"))["nodegroups"] == ["gpu"]
    update = (
        await call(
            api.update_nodegroup_config,
            clusterName="c1",
            nodegroupName="gpu",
            scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 4},
        )
    )["update"]
    assert update["status"] == "InProgress"
    assert {p["type"] for p in update["params"]} >= {"DesiredSize"}
    clock.advance(Timings().nodegroup_update)
    await eks.settle()
    done = (await call(api.describe_update, name="c1", updateId=update["id"], nodegroupName="gpu"))["update"]
    assert done["status"] == "Successful"
    upgrade = (await call(api.update_cluster_version, name="c1", version="1.32"))["update"]
    assert upgrade["type"] == "VersionUpdate"
    assert (await call(api.describe_cluster, name="c1"))["cluster"]["status"] == "UPDATING"
    skip = await error_of(api.update_cluster_version, name="c1", version="1.32")
    assert skip.response["Error"]["Code"] == "ResourceInUseException"
    clock.advance(Timings().cluster_upgrade)
    await eks.settle()
    assert (await call(api.describe_update, name="c1", updateId=upgrade["id"]))["update"]["status"] == "Successful"
    assert (await call(api.describe_cluster, name="c1"))["cluster"]["version"] == "1.32"

    principal = "arn:aws:iam::111111111111:role/someone"
    entry = (await call(api.create_access_entry, clusterName="c1", principalArn=principal))["accessEntry"]
    assert entry["principalArn"] == principal
    associated = await call(
        api.associate_access_policy,
        clusterName="c1",
        principalArn=principal,
        policyArn="arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
        accessScope={"type": "cluster"},
    )
    assert associated["associatedAccessPolicy"]["accessScope"]["type"] == "cluster"
    policies = await call(api.list_associated_access_policies, clusterName="c1", principalArn=principal)
    assert [p["policyArn"] for p in policies["associatedAccessPolicies"]] == [
        "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
    ]
    listed = (await call(api.list_access_entries, clusterName="c1"))["accessEntries"]
    assert set(listed) == {principal, eks.principal_arn}, "the creator got an access entry at creation"
    assert (await call(api.describe_access_entry, clusterName="c1", principalArn=principal))["accessEntry"]
    await call(api.delete_access_entry, clusterName="c1", principalArn=principal)
    gone = await error_of(api.describe_access_entry, clusterName="c1", principalArn=principal)
    assert gone.response["Error"]["Code"] == "ResourceNotFoundException"


async def test_list_updates_pages_the_cluster_and_node_group_update_ids(eks: EksEmulator, clock: SimClock) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    assert (await call(api.list_updates, name="c1"))["updateIds"] == []
    await call(
        api.create_nodegroup,
        clusterName="c1",
        nodegroupName="cpu",
        subnets=SUBNETS,
        nodeRole=NODE_ROLE,
        instanceTypes=["m7i.large"],
        scalingConfig={"minSize": 0, "maxSize": 9, "desiredSize": 1},
    )
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    resized = []
    for size in (2, 3):
        scaling = {"minSize": 0, "maxSize": 9, "desiredSize": size}
        update = await call(api.update_nodegroup_config, clusterName="c1", nodegroupName="cpu", scalingConfig=scaling)
        resized.append(update["update"]["id"])
        clock.advance(Timings().nodegroup_update)
        await eks.settle()
    upgrade = (await call(api.update_cluster_version, name="c1", version="1.32"))["update"]["id"]

    assert (await call(api.list_updates, name="c1"))["updateIds"] == [upgrade]
    first = await call(api.list_updates, name="c1", nodegroupName="cpu", maxResults=1)
    assert first["updateIds"] == resized[:1] and first["nextToken"]
    rest = await call(api.list_updates, name="c1", nodegroupName="cpu", nextToken=first["nextToken"])
    assert rest["updateIds"] == resized[1:] and "nextToken" not in rest
    pages = api.get_paginator("list_updates").paginate(name="c1", nodegroupName="cpu", PaginationConfig={"PageSize": 1})
    assert [i for page in await asyncio.to_thread(list, pages) for i in page["updateIds"]] == resized

    for kwargs, code in [
        ({"name": "nope"}, "ResourceNotFoundException"),
        ({"name": "c1", "nodegroupName": "nope"}, "ResourceNotFoundException"),
        ({"name": "c1", "addonName": "vpc-cni"}, "ResourceNotFoundException"),
        ({"name": "c1", "nextToken": "not-a-token"}, "InvalidParameterException"),
    ]:
        assert (await error_of(api.list_updates, **kwargs)).response["Error"]["Code"] == code, kwargs


async def test_list_access_policies_names_the_policies_that_can_be_associated(
    eks: EksEmulator, clock: SimClock
) -> None:
    api = client(eks, "eks")
    listed = (await call(api.list_access_policies))["accessPolicies"]
    arns = {p["name"]: p["arn"] for p in listed}
    assert arns["AmazonEKSClusterAdminPolicy"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    assert {"AmazonEKSAdminPolicy", "AmazonEKSEditPolicy", "AmazonEKSViewPolicy"} <= set(arns)
    first = await call(api.list_access_policies, maxResults=2)
    assert len(first["accessPolicies"]) == 2
    second = await call(api.list_access_policies, maxResults=2, nextToken=first["nextToken"])
    assert second["accessPolicies"] == listed[2:4]

    await active_cluster(eks, clock, api)
    principal = "arn:aws:iam::111111111111:role/someone"
    await call(api.create_access_entry, clusterName="c1", principalArn=principal)
    for name, arn in arns.items():
        associated = await call(
            api.associate_access_policy,
            clusterName="c1",
            principalArn=principal,
            policyArn=arn,
            accessScope={"type": "cluster"},
        )
        assert associated["associatedAccessPolicy"]["policyArn"] == arn, name
    unknown = await error_of(
        api.associate_access_policy,
        clusterName="c1",
        principalArn=principal,
        policyArn="arn:aws:eks::aws:cluster-access-policy/AmazonEKSMadeUpPolicy",
        accessScope={"type": "cluster"},
    )
    assert unknown.response["Error"]["Code"] == "InvalidParameterException"


async def test_a_cluster_with_node_groups_is_not_deleted_409(eks: EksEmulator, clock: SimClock) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    await call(
        api.create_nodegroup,
        clusterName="c1",
        nodegroupName="ng",
        subnets=SUBNETS,
        nodeRole=NODE_ROLE,
        instanceTypes=["m7i.large"],
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
    )
    refused = await error_of(api.delete_cluster, name="c1")
    assert refused.response["Error"]["Code"] == "ResourceInUseException"
    assert refused.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert "nodegroups" in refused.response["Error"]["Message"]
    await call(api.delete_nodegroup, clusterName="c1", nodegroupName="ng")
    clock.advance(Timings().nodegroup_delete)
    await eks.settle()
    assert (await call(api.delete_cluster, name="c1"))["cluster"]["status"] == "DELETING"
    clock.advance(Timings().cluster_delete)
    await eks.settle()
    missing = await error_of(api.describe_cluster, name="c1")
    assert missing.response["Error"]["Code"] == "ResourceNotFoundException"
    assert missing.response["ResponseMetadata"]["HTTPStatusCode"] == 404


async def test_node_groups_materialise_nodes_per_zone_with_ec2_names_and_labels(
    eks: EksEmulator, clock: SimClock
) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    await call(
        api.create_nodegroup,
        clusterName="c1",
        nodegroupName="gpu",
        subnets=SUBNETS,
        nodeRole=NODE_ROLE,
        instanceTypes=["p5.48xlarge"],
        amiType="AL2023_x86_64_NVIDIA",
        labels={"team": "ml"},
        taints=[{"key": "gpu", "value": "yes", "effect": "NO_SCHEDULE"}],
        scalingConfig={"minSize": 4, "maxSize": 4, "desiredSize": 4},
    )
    cluster = eks.cluster("c1")
    assert cluster is not None and cluster.kube is not None
    assert cluster.kube.objects("Node") == [], "no node before the node group is provisioned"
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    nodes = cluster.kube.objects("Node")
    assert len(nodes) == 4
    zones = sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes)
    assert zones == ["us-east-1a", "us-east-1a", "us-east-1b", "us-east-1b"]
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert node["metadata"]["name"].startswith("ip-10-0-")
        assert node["metadata"]["name"].endswith(".ec2.internal")
        assert labels["eks.amazonaws.com/nodegroup"] == "gpu"
        assert labels["eks.amazonaws.com/capacityType"] == "ON_DEMAND"
        assert labels["team"] == "ml"
        gpus = cluster.kube.kubelet.gpus(node["metadata"]["name"])
        assert gpus is not None and (gpus.count, gpus.driver_ready) == (8, True)
        assert node["spec"]["taints"][0]["effect"] == "NoSchedule"
    await call(
        api.update_nodegroup_config,
        clusterName="c1",
        nodegroupName="gpu",
        scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 2},
    )
    clock.advance(Timings().nodegroup_update)
    await eks.settle()
    zones = sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in cluster.kube.objects("Node"))
    assert zones == ["us-east-1a", "us-east-1b"], "scaling in keeps the zones balanced"


async def test_ec2_describe_instance_types_gives_the_gpus(eks: EksEmulator) -> None:
    ec2 = client(eks, "ec2")
    expected = {
        "p5.48xlarge": ("H100", 8),
        "p5e.48xlarge": ("H200", 8),
        "p4d.24xlarge": ("A100", 8),
        "g6.xlarge": ("L4", 1),
        "g5.xlarge": ("A10G", 1),
    }
    answer = await call(ec2.describe_instance_types, InstanceTypes=[*expected, "m7i.large"])
    found = {t["InstanceType"]: t for t in answer["InstanceTypes"]}
    for name, (gpu, count) in expected.items():
        info = found[name]["GpuInfo"]
        assert (info["Gpus"][0]["Name"], info["Gpus"][0]["Count"], info["Gpus"][0]["Manufacturer"]) == (
            gpu,
            count,
            "NVIDIA",
        )
        assert info["TotalGpuMemoryInMiB"] == info["Gpus"][0]["MemoryInfo"]["SizeInMiB"] * count
    assert "GpuInfo" not in found["m7i.large"]
    unknown = await error_of(ec2.describe_instance_types, InstanceTypes=["x9.huge"])
    assert unknown.response["Error"]["Code"] == "InvalidInstanceType"
    subnets = (await call(ec2.describe_subnets, SubnetIds=SUBNETS))["Subnets"]
    assert {s["SubnetId"]: s["AvailabilityZone"] for s in subnets} == dict(
        zip(SUBNETS, ["us-east-1a", "us-east-1b"], strict=True)
    )


async def test_sts_answers_the_signed_in_identity(eks: EksEmulator) -> None:
    identity = await call(client(eks, "sts").get_caller_identity)
    assert identity["Arn"] == eks.principal_arn
    assert identity["Account"] == "111111111111"


async def test_a_wrong_secret_an_unsigned_or_a_tampered_request_is_refused(eks: EksEmulator) -> None:
    wrong = await error_of(client(eks, "eks", secret="not-the-secret").list_clusters)
    assert wrong.response["Error"]["Code"] == "InvalidSignatureException"
    assert wrong.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    wrong_sts = await error_of(client(eks, "sts", secret="not-the-secret").get_caller_identity)
    assert wrong_sts.response["Error"]["Code"] == "InvalidSignatureException"
    async with httpx.AsyncClient(base_url=eks.url) as http:
        unsigned = await http.get("/clusters")
        assert unsigned.status_code == 403
        assert unsigned.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"

    captured: dict[str, Any] = {}

    def keep(request: Any, **_: Any) -> None:
        captured["headers"] = dict(request.headers)
        body = request.body
        captured["body"] = body.encode() if isinstance(body, str) else body

    sts = client(eks, "sts")
    sts.meta.events.register("before-send.sts.GetCallerIdentity", keep)
    await call(sts.get_caller_identity)
    headers = {
        k: (v.decode() if isinstance(v, bytes) else v)
        for k, v in captured["headers"].items()
        if k.lower() != "content-length"
    }
    async with httpx.AsyncClient(base_url=eks.url) as http:
        replayed = await http.post("/", headers=headers, content=captured["body"])
        assert replayed.status_code == 200, "the captured request itself is valid"
        tampered = await http.post("/", headers=headers, content=captured["body"] + b"&Extra=1")
        assert tampered.status_code == 403
        assert b"InvalidSignatureException" in tampered.content


async def test_faults_quota_throttling_refused_delete_and_a_silent_control_plane(
    eks: EksEmulator, clock: SimClock
) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    eks.faults.quota(clusters=1)
    quota = await error_of(api.create_cluster, name="c2", roleArn="r", resourcesVpcConfig={"subnetIds": SUBNETS})
    assert quota.response["Error"]["Code"] == "ResourceLimitExceededException"
    eks.faults.clear()
    eks.faults.throttle(1, retry_after=7)
    throttled = await error_of(api.list_clusters)
    assert throttled.response["Error"]["Code"] == "ThrottlingException"
    assert throttled.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert throttled.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "7"
    assert (await call(api.list_clusters))["clusters"] == ["c1"], "only the next request is throttled"
    eks.faults.refuse_delete("c1")
    refused = await error_of(api.delete_cluster, name="c1")
    assert refused.response["Error"]["Code"] == "AccessDeniedException"
    eks.faults.never_answers("c3")
    await call(api.create_cluster, name="c3", roleArn="r", resourcesVpcConfig={"subnetIds": SUBNETS})
    clock.advance(Timings().cluster_create * 10)
    await eks.settle()
    assert (await call(api.describe_cluster, name="c3"))["cluster"]["status"] == "CREATING"
    active = eks.cluster("c1")
    assert active is not None and active.kube is not None and not active.kube.unresponsive
    eks.faults.never_answers("c1")
    assert active.kube.unresponsive, "an ACTIVE cluster's API server stops answering"
    eks.faults.clear()
    assert not active.kube.unresponsive


async def test_a_stockout_fails_the_node_group_with_a_health_issue(eks: EksEmulator, clock: SimClock) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    eks.faults.stockout("p5.48xlarge")
    await call(
        api.create_nodegroup,
        clusterName="c1",
        nodegroupName="h100",
        subnets=SUBNETS,
        nodeRole=NODE_ROLE,
        instanceTypes=["p5.48xlarge"],
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
    )
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    group = (await call(api.describe_nodegroup, clusterName="c1", nodegroupName="h100"))["nodegroup"]
    assert group["status"] == "CREATE_FAILED"
    issue = group["health"]["issues"][0]
    assert issue["code"] == "AsgInstanceLaunchFailures"
    assert "InsufficientInstanceCapacity" in issue["message"]


async def test_spot_reclaim_removes_the_node_and_a_replacement_comes_later(eks: EksEmulator, clock: SimClock) -> None:
    api = client(eks, "eks")
    await active_cluster(eks, clock, api)
    await call(
        api.create_nodegroup,
        clusterName="c1",
        nodegroupName="spot",
        subnets=SUBNETS,
        nodeRole=NODE_ROLE,
        instanceTypes=["g6.xlarge"],
        capacityType="SPOT",
        amiType="AL2023_x86_64_NVIDIA",
        scalingConfig={"minSize": 2, "maxSize": 2, "desiredSize": 2},
    )
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    cluster = eks.cluster("c1")
    assert cluster is not None and cluster.kube is not None
    before = {n["metadata"]["name"] for n in cluster.kube.objects("Node")}
    victim = sorted(before)[0]
    await eks.faults.reclaim_spot(victim)
    assert {n["metadata"]["name"] for n in cluster.kube.objects("Node")} == before - {victim}
    clock.advance(Timings().spot_replacement)
    await eks.settle()
    after = {n["metadata"]["name"] for n in cluster.kube.objects("Node")}
    assert len(after) == 2
    assert victim not in after


async def test_a_seeded_cluster_is_active_with_its_own_node_groups(eks: EksEmulator) -> None:
    adopt_id = await eks.seed_cluster("theirs", nodegroups={"workers": ("m7i.large", 2)})
    assert adopt_id == "us-east-1/theirs"
    api = client(eks, "eks")
    assert (await call(api.describe_cluster, name="theirs"))["cluster"]["status"] == "ACTIVE"
    assert (await call(api.list_nodegroups, clusterName="theirs"))["nodegroups"] == ["workers"]
    entries = (await call(api.list_access_entries, clusterName="theirs"))["accessEntries"]
    assert eks.principal_arn in entries
    await eks.seed_cluster("closed", admin_access=False)
    entries = (await call(api.list_access_entries, clusterName="closed"))["accessEntries"]
    assert eks.principal_arn not in entries


OFF = "[settings.kubelet-device-plugins.nvidia]\nenabled = false\n"


async def test_bottlerocket_nvidia_nodes_run_the_host_device_plugin_unless_their_user_data_turns_it_off(
    eks: EksEmulator, clock: SimClock
) -> None:
    """Bottlerocket's NVIDIA plugin is a host service, on by default; a launch template's user data (Bottlerocket's
    TOML settings) with settings.kubelet-device-plugins.nvidia.enabled = false keeps it off."""
    api = client(eks, "eks")
    ec2 = client(eks, "ec2")
    await active_cluster(eks, clock, api)
    made = await call(
        ec2.create_launch_template,
        LaunchTemplateName="no-host-plugin",
        LaunchTemplateData={"UserData": base64.b64encode(OFF.encode()).decode()},
    )
    template_id = made["LaunchTemplate"]["LaunchTemplateId"]
    assert made["LaunchTemplate"]["LatestVersionNumber"] == 1
    common = {
        "clusterName": "c1",
        "subnets": SUBNETS[:1],
        "nodeRole": NODE_ROLE,
        "instanceTypes": ["g6.xlarge"],
        "amiType": "BOTTLEROCKET_x86_64_NVIDIA",
        "scalingConfig": {"minSize": 1, "maxSize": 1, "desiredSize": 1},
    }
    await call(api.create_nodegroup, nodegroupName="default", **common)
    described = await call(
        api.create_nodegroup, nodegroupName="off", launchTemplate={"id": template_id, "version": "1"}, **common
    )
    assert described["nodegroup"]["launchTemplate"] == {"id": template_id, "name": "no-host-plugin", "version": "1"}
    missing = await error_of(
        api.create_nodegroup, nodegroupName="nope", launchTemplate={"name": "no-such-template"}, **common
    )
    assert missing.response["Error"]["Code"] == "InvalidParameterException"
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    cluster = eks.cluster("c1")
    assert cluster is not None and cluster.kube is not None
    kubelet = cluster.kube.kubelet
    node_of = {
        n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"]: n["metadata"]["name"]
        for n in cluster.kube.objects("Node")
    }
    for _ in range(500):
        if kubelet.registered(node_of["default"]) is not None:
            break
        await asyncio.sleep(0.01)
    assert kubelet.registered(node_of["default"]) == "nvidia-gpu.sock", "Bottlerocket's own plugin, by default"
    assert len(kubelet.host_plugins(node_of["default"])) == 1
    assert kubelet.host_plugins(node_of["off"]) == [], "turned off by the user data"
    assert kubelet.registered(node_of["off"]) is None


@pytest.mark.parametrize("turns", range(8))
async def test_stopping_the_world_ends_its_waker_whichever_turn_the_stop_lands_on(clock: SimClock, turns: int) -> None:
    """A stop that lands while the waker reaps its timers ends it (it once looped on, and
    teardown waited forever: CI hung 900 s on test_aws_machines)."""
    async with KubeApiServer(clock) as kube, EksEmulator(clock, kube) as emulator:
        world = emulator.world
        world.schedule(60, _nothing)  # the waker now also sleeps on the clock
        await _turns(3)
        world.schedule(30, _nothing)  # wakes it: asyncio.wait returns, the finally reaps
        await _turns(turns)
        waker = world._waker
        assert waker is not None
        waker.cancel()
        await _turns(10)
        assert waker.done()


async def _nothing() -> None:
    return None


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_list_clusters_pages_the_region_s_cluster_names(eks: EksEmulator, clock: SimClock) -> None:
    api = client(eks, "eks")
    for name in ("c1", "c2", "c3"):
        await active_cluster(eks, clock, api, name)
    first = await call(api.list_clusters, maxResults=2)
    assert first["clusters"] == ["c1", "c2"] and first["nextToken"]
    rest = await call(api.list_clusters, nextToken=first["nextToken"])
    assert rest["clusters"] == ["c3"] and "nextToken" not in rest
    assert (await error_of(api.list_clusters, maxResults=101)).response["Error"]["Code"] == "InvalidParameterException"


async def test_cluster_tags_are_refused_as_eks_refuses_them(eks: EksEmulator) -> None:
    """EKS' tag rules: a key of 1-128 characters, not `aws:`, a value of at most 256, both of letters,
    digits, spaces and `+ - = . _ : / @`; better-compute's marks, keys as they are, pass."""
    api = client(eks, "eks")
    body: dict[str, Any] = {
        "roleArn": "arn:aws:iam::111111111111:role/eks-cluster",
        "resourcesVpcConfig": {"subnetIds": SUBNETS},
    }
    for tags in ({"aws:x": "v"}, {"k": "v" * 257}, {"k" * 129: "v"}, {"k": "a,b"}):
        refused = await error_of(api.create_cluster, name="tagged", tags=tags, **body)
        assert refused.response["Error"]["Code"] == "InvalidParameterException"
    marks = {"better-compute.dev/substrate-pool": "pool_x1", "better-compute.dev/deployment": "0123456789abcdef"}
    made = await call(api.create_cluster, name="tagged", tags=marks, **body)
    assert made["cluster"]["tags"] == marks
