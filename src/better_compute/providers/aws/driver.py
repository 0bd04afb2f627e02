"""`EksKubernetes`: `ProviderKubernetes` on Amazon EKS, through boto3.

A cluster's id is `<region>/<name>`. Creation is idempotent twice over: the driver
first looks for the cluster, and passes a `clientRequestToken` derived from what
it asks, so a retry after a lost answer finds the first attempt's cluster.
Clusters are made with access entries on (`API_AND_CONFIG_MAP`) and the creator
as admin; node groups spread over the account's subnets (or those in the
flavor's zones), with `desiredSize = nodes x zones`. Every SDK call runs in the
driver's bounded pool (`AwsClients.call`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.provider import (
    CREDENTIAL_TTL_SECONDS,
    Autoscaling,
    ClusterCredentials,
    ClusterSpec,
    ClusterState,
    GpuInfo,
    NodePoolSpec,
    NodePoolState,
    Quota,
    QuotaNeed,
)
from better_compute.providers.aws.access import NO_ADMIN_ACCESS_ENTRY, admin_access_problem, principal_of
from better_compute.providers.aws.clients import AwsClients
from better_compute.providers.aws.instance_types import InstanceTypes
from better_compute.providers.aws.machines import instance_of, remove_instances
from better_compute.providers.aws.mapping import bounds_update, cluster_state, node_pool_state, scaling_config
from better_compute.providers.aws.nodegroups import create_nodegroup_request, request_token, shape_changes
from better_compute.providers.aws.quota import vcpu_quotas
from better_compute.providers.aws.token import cluster_token
from better_compute.providers.aws.validate import substrate_problems
from better_compute.providers.aws.vocabulary import (
    AMI_GPU,
    AMI_STANDARD,
    AUTHENTICATION_MODE,
    REGION_PATTERN,
    VOCABULARY,
    ZONE_PATTERN,
)
from better_compute.vps.provider import ProviderAccount

__all__ = ["EksKubernetes"]


def _minor(version: str) -> str:
    """EKS versions are `<major>.<minor>`: a fuller version (1.31.2) names its minor."""
    return ".".join(version.split(".")[:2])


def _split(cluster_id: str) -> tuple[str, str]:
    region, _, name = cluster_id.partition("/")
    if not REGION_PATTERN.match(region) or not name or "/" in name:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"an EKS cluster id is <region>/<cluster name>, not {cluster_id!r}")
    return region, name


class EksKubernetes:
    """The EKS driver. One instance serves every account; clients are per region."""

    vocabulary = VOCABULARY

    def __init__(self, clients: AwsClients, clock: Clock) -> None:
        self._aws = clients
        self._clock = clock
        self._types = InstanceTypes(clients)
        self._subnet_zones: dict[str, str] = {}
        self._principal: str | None = None

    # -- helpers ---------------------------------------------------------------------------

    def _config(self, account: ProviderAccount, key: str) -> Any:
        value = account.config.get(key)
        if not value:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"provider account {account.name} has no {key}", path=f"/config/{key}"
            )
        return value

    async def _describe(self, region: str, name: str) -> Mapping[str, Any] | None:
        try:
            answer = await self._aws.call("DescribeCluster", "eks", region, lambda eks: eks.describe_cluster(name=name))
        except ComputeError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return None
            raise
        cluster: Mapping[str, Any] = answer["cluster"]
        return cluster

    async def _state(self, region: str, cluster: Mapping[str, Any]) -> ClusterState:
        name = cluster["name"]
        groups: list[str] = []
        if cluster.get("status") != "DELETING":
            answer = await self._aws.call(
                "ListNodegroups", "eks", region, lambda eks: eks.list_nodegroups(clusterName=name)
            )
            groups = list(answer.get("nodegroups", []))
        return cluster_state(cluster, region, groups)

    async def _zones_of(self, region: str, subnets: list[str]) -> dict[str, str]:
        """subnet id -> Availability Zone, from EC2 DescribeSubnets (cached)."""
        unknown = [s for s in subnets if s not in self._subnet_zones]
        if unknown:
            answer = await self._aws.call(
                "DescribeSubnets", "ec2", region, lambda ec2: ec2.describe_subnets(SubnetIds=unknown)
            )
            for subnet in answer.get("Subnets", []):
                self._subnet_zones[subnet["SubnetId"]] = subnet["AvailabilityZone"]
        return {s: self._subnet_zones[s] for s in subnets if s in self._subnet_zones}

    @staticmethod
    def _distinct(zones: Mapping[str, str], subnets: list[str]) -> tuple[str, ...]:
        seen: list[str] = []
        for subnet in subnets:
            zone = zones.get(subnet)
            if zone is not None and zone not in seen:
                seen.append(zone)
        return tuple(seen)

    # -- clusters --------------------------------------------------------------------------

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        region = spec.location
        if ZONE_PATTERN.match(region) or not REGION_PATTERN.match(region):
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"EKS clusters are regional: {region!r} is not a region", path="/location"
            )
        existing = await self._describe(region, spec.name)
        if existing is None:
            existing = await self._create_cluster(account, region, spec)
        private = bool((existing.get("resourcesVpcConfig") or {}).get("endpointPrivateAccess", False))
        if private != spec.private_nodes:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"cluster {region}/{spec.name} has private_nodes={private}; a cluster's mode never changes in place",
            )
        return await self._state(region, existing)

    async def _create_cluster(self, account: ProviderAccount, region: str, spec: ClusterSpec) -> Mapping[str, Any]:
        request: dict[str, Any] = {
            "name": spec.name,
            "roleArn": self._config(account, "eksClusterRoleArn"),
            "resourcesVpcConfig": {
                "subnetIds": list(self._config(account, "eksSubnetIds")),
                "endpointPublicAccess": True,
                "endpointPrivateAccess": spec.private_nodes,
            },
            "accessConfig": {
                "authenticationMode": AUTHENTICATION_MODE,
                "bootstrapClusterCreatorAdminPermissions": True,
            },
            "clientRequestToken": request_token("cluster", region, spec.name, spec.private_nodes),
            "tags": dict(spec.labels),
        }
        if spec.version:
            request["version"] = _minor(spec.version)
        try:
            answer = await self._aws.call("CreateCluster", "eks", region, lambda eks: eks.create_cluster(**request))
        except ComputeError as exc:
            if exc.code is not ErrorCode.CONFLICT:
                raise
            found = await self._describe(region, spec.name)
            if found is None:
                raise
            return found
        created: Mapping[str, Any] = answer["cluster"]
        return created

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        region, name = _split(cluster_id)
        cluster = await self._describe(region, name)
        return None if cluster is None else await self._state(region, cluster)

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        return await self.get_cluster(account, f"{location}/{name}")  # the id is the region and the name

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        region = str(self._config(account, "region"))

        def names(eks: Any) -> list[str]:
            return [name for page in eks.get_paginator("list_clusters").paginate() for name in page["clusters"]]

        described = [
            await self._describe(region, name) for name in await self._aws.call("ListClusters", "eks", region, names)
        ]
        return tuple([await self._state(region, cluster) for cluster in described if cluster is not None])

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        region, name = _split(cluster_id)
        try:
            await self._aws.call("DeleteCluster", "eks", region, lambda eks: eks.delete_cluster(name=name))
        except ComputeError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise

    async def upgrade_cluster(self, account: ProviderAccount, cluster_id: str, version: str) -> ClusterState:
        region, name = _split(cluster_id)
        cluster = await self._describe(region, name)
        if cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"EKS cluster {cluster_id} does not exist")
        version = _minor(version)
        if cluster.get("version") != version and cluster.get("status") != "UPDATING":
            token = request_token("upgrade", cluster["arn"], version)
            await self._aws.call(
                "UpdateClusterVersion",
                "eks",
                region,
                lambda eks: eks.update_cluster_version(name=name, version=version, clientRequestToken=token),
            )
            cluster = await self._describe(region, name) or cluster
        return await self._state(region, cluster)

    async def upgrade_versions(self, account: ProviderAccount, cluster_id: str) -> tuple[str, ...]:
        """DescribeClusterVersions' supported versions the cluster may move to: EKS upgrades one minor at a time."""
        region, name = _split(cluster_id)
        cluster = await self._describe(region, name)
        if cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"EKS cluster {cluster_id} does not exist")
        answer = await self._aws.call(
            "DescribeClusterVersions", "eks", region, lambda eks: eks.describe_cluster_versions(clusterType="eks")
        )
        major, minor = (int(x) for x in str(cluster["version"]).split(".")[:2])
        following = f"{major}.{minor + 1}"
        return tuple(
            str(v["clusterVersion"])
            for v in answer.get("clusterVersions", [])
            if v.get("clusterVersion") == following and v.get("status") != "UNSUPPORTED"
        )

    # -- node groups -----------------------------------------------------------------------

    async def _nodegroup(self, region: str, cluster: str, name: str) -> Mapping[str, Any] | None:
        try:
            answer = await self._aws.call(
                "DescribeNodegroup",
                "eks",
                region,
                lambda eks: eks.describe_nodegroup(clusterName=cluster, nodegroupName=name),
            )
        except ComputeError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return None
            raise
        group: Mapping[str, Any] = answer["nodegroup"]
        return group

    async def _pool_state(self, region: str, group: Mapping[str, Any]) -> NodePoolState:
        subnets = list(group.get("subnets") or [])
        zones = self._distinct(await self._zones_of(region, subnets), subnets)
        machine = (group.get("instanceTypes") or [""])[0]
        gpus = await self._gpus_of(region, machine) if machine else None
        return node_pool_state(group, zones, gpus)

    async def _subnets_for(self, account: ProviderAccount, region: str, zones: tuple[str, ...]) -> list[str]:
        subnets = [str(s) for s in self._config(account, "eksSubnetIds")]
        if not zones:
            return subnets
        where = await self._zones_of(region, subnets)
        chosen = [s for s in subnets if where.get(s) in zones]
        missing = sorted(set(zones) - {where[s] for s in chosen})
        if missing:
            raise ComputeError(
                ErrorCode.INVALID_INPUT,
                f"the account's subnets {subnets} have none in {', '.join(missing)}",
                path="/zones",
            )
        return chosen

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        region, cluster = _split(cluster_id)
        if spec.node_count < 0:
            raise ComputeError(ErrorCode.INVALID_INPUT, "node_count must be at least 0", path="/nodeCount")
        gpus = await self._gpus_of(region, spec.machine_type)
        if spec.accelerators is not None and (
            gpus is None or (gpus.accelerator_type, gpus.count) != (spec.accelerators.type, spec.accelerators.count)
        ):
            have = f"{gpus.count} x {gpus.accelerator_type}" if gpus else "no GPUs"
            raise ComputeError(
                ErrorCode.INVALID_INPUT,
                f"{spec.machine_type} has {have}, not {spec.accelerators.count} x {spec.accelerators.type}",
                path="/accelerators",
            )
        subnets = await self._subnets_for(account, region, spec.zones)
        zones = self._distinct(await self._zones_of(region, subnets), subnets)
        ami = AMI_GPU if gpus is not None else AMI_STANDARD
        capacity = "SPOT" if spec.spot else "ON_DEMAND"
        existing = await self._nodegroup(region, cluster, spec.name)
        if existing is not None and existing.get("status") == "CREATE_FAILED":
            await self._remake(region, cluster, existing)
        if existing is None:
            existing = await self._create_nodegroup(account, region, cluster_id, spec, subnets, zones, ami, capacity)
        self._same_shape(existing, spec, ami, capacity, subnets)
        return await self._pool_state(region, existing)

    async def _remake(self, region: str, cluster: str, group: Mapping[str, Any]) -> None:
        """A node group whose creation failed never becomes ACTIVE (EKS takes no update to it): delete it, and
        say so; the next ensure, once it is gone, makes it again."""
        name = str(group["nodegroupName"])
        issues = "; ".join(
            f"{i.get('code')}: {i.get('message')}" for i in (group.get("health") or {}).get("issues", [])
        )
        await self._aws.call(
            "DeleteNodegroup", "eks", region, lambda eks: eks.delete_nodegroup(clusterName=cluster, nodegroupName=name)
        )
        stockout = "InsufficientInstanceCapacity" in issues
        raise ComputeError(
            ErrorCode.UNAVAILABLE,
            f"node group {name} failed to be created ({issues or 'CREATE_FAILED'}): deleting it to make it again",
            reason="stockout" if stockout else None,
        )

    async def _create_nodegroup(
        self,
        account: ProviderAccount,
        region: str,
        cluster_id: str,
        spec: NodePoolSpec,
        subnets: list[str],
        zones: tuple[str, ...],
        ami: str,
        capacity: str,
    ) -> Mapping[str, Any]:
        cluster = cluster_id.partition("/")[2]
        request = create_nodegroup_request(
            cluster_id=cluster_id,
            spec=spec,
            node_role=str(self._config(account, "eksNodeRoleArn")),
            subnets=subnets,
            zones=zones,
            ami=ami,
            capacity=capacity,
        )
        try:
            answer = await self._aws.call("CreateNodegroup", "eks", region, lambda eks: eks.create_nodegroup(**request))
        except ComputeError as exc:
            if exc.code is not ErrorCode.CONFLICT:
                raise
            found = await self._nodegroup(region, cluster, spec.name)
            if found is None:
                raise
            return found
        created: Mapping[str, Any] = answer["nodegroup"]
        return created

    @staticmethod
    def _same_shape(group: Mapping[str, Any], spec: NodePoolSpec, ami: str, capacity: str, subnets: list[str]) -> None:
        changed = shape_changes(group, spec, ami, capacity, subnets)
        if changed:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"node group {spec.name} exists with another shape ({'; '.join(changed)}); "
                "a node pool never changes shape: create a new flavor instead",
            )

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState | None:
        region, cluster = _split(cluster_id)
        group = await self._nodegroup(region, cluster, name)
        return None if group is None else await self._pool_state(region, group)

    async def upgrade_node_pool(
        self, account: ProviderAccount, cluster_id: str, name: str, version: str
    ) -> NodePoolState:
        """UpdateNodegroupVersion to the control plane's minor; EKS rolls the node group's instances."""
        region, cluster = _split(cluster_id)
        group = await self._nodegroup(region, cluster, name)
        if group is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"node group {name} of EKS cluster {cluster_id} does not exist")
        version = _minor(version)
        if group.get("version") != version and group.get("status") == "ACTIVE":
            token = request_token("upgrade", group["nodegroupArn"], version)
            await self._aws.call(
                "UpdateNodegroupVersion",
                "eks",
                region,
                lambda eks: eks.update_nodegroup_version(
                    clusterName=cluster, nodegroupName=name, version=version, clientRequestToken=token
                ),
            )
            group = await self._nodegroup(region, cluster, name) or group
        return await self._pool_state(region, group)

    async def resize_node_pool(
        self,
        account: ProviderAccount,
        cluster_id: str,
        name: str,
        node_count: int,
        autoscaling: Autoscaling | None = None,
    ) -> NodePoolState:
        region, cluster = _split(cluster_id)
        if node_count < 0:
            raise ComputeError(ErrorCode.INVALID_INPUT, "node_count must be at least 0", path="/nodeCount")
        group = await self._nodegroup(region, cluster, name)
        if group is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"node group {name} of EKS cluster {cluster_id} does not exist")
        subnets = list(group.get("subnets") or [])
        zones = self._distinct(await self._zones_of(region, subnets), subnets)
        current = group.get("scalingConfig") or {}
        if autoscaling is None:
            scaling = scaling_config(node_count, None, len(zones))
        else:
            scaling = bounds_update(autoscaling, len(zones), current)
        if any(current.get(key) != value for key, value in scaling.items()):
            await self._aws.call(
                "UpdateNodegroupConfig",
                "eks",
                region,
                lambda eks: eks.update_nodegroup_config(clusterName=cluster, nodegroupName=name, scalingConfig=scaling),
            )
            group = await self._nodegroup(region, cluster, name) or group
        return await self._pool_state(region, group)

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        region, cluster = _split(cluster_id)
        try:
            await self._aws.call(
                "DeleteNodegroup",
                "eks",
                region,
                lambda eks: eks.delete_nodegroup(clusterName=cluster, nodegroupName=name),
            )
        except ComputeError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise

    async def remove_machines(
        self,
        account: ProviderAccount,
        cluster_id: str,
        pool_name: str,
        provider_ids: tuple[str, ...],
        *,
        replace: bool,
    ) -> None:
        """TerminateInstanceInAutoScalingGroup on the node group's Auto Scaling group (providers/aws/machines.py)."""
        if not provider_ids:
            return
        region, cluster = _split(cluster_id)
        for provider_id in provider_ids:
            instance_of(provider_id)
        group = await self._nodegroup(region, cluster, pool_name)
        if group is None:
            raise ComputeError(
                ErrorCode.NOT_FOUND, f"node group {pool_name} of EKS cluster {cluster_id} does not exist"
            )
        await remove_instances(self._aws, region, cluster, group, provider_ids, replace=replace)

    # -- access ----------------------------------------------------------------------------

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        region, name = _split(cluster_id)
        cluster = await self._describe(region, name)
        if cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"EKS cluster {cluster_id} does not exist")
        endpoint = cluster.get("endpoint")
        if not endpoint or cluster.get("status") not in ("ACTIVE", "UPDATING"):
            raise ComputeError(
                ErrorCode.INVALID_STATE, f"EKS cluster {cluster_id} is {cluster.get('status')}, not ACTIVE"
            )
        sts_endpoint = await self._aws.call("sts endpoint", "sts", region, lambda sts: str(sts.meta.endpoint_url))
        frozen = await self._aws.run("credentials", self._aws.frozen_credentials)
        now = self._clock.now()
        token = cluster_token(frozen, sts_endpoint=sts_endpoint, region=region, cluster_name=name, signed_at=now)
        redact_value(token)
        return ClusterCredentials(
            endpoint=endpoint,
            ca_data=(cluster.get("certificateAuthority") or {}).get("data"),
            token=token,
            expires_at=now + timedelta(seconds=CREDENTIAL_TTL_SECONDS),
        )

    async def _caller(self, region: str) -> str:
        if self._principal is None:
            answer = await self._aws.call("GetCallerIdentity", "sts", region, lambda sts: sts.get_caller_identity())
            self._principal = principal_of(answer["Arn"])
        return self._principal

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        region, name = _split(adopt_id)
        cluster = await self._describe(region, name)
        if cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"EKS cluster {adopt_id} does not exist in this account")
        principal = await self._caller(region)
        policies: list[Mapping[str, Any]] | None = None
        if (cluster.get("accessConfig") or {}).get("authenticationMode", "CONFIG_MAP") != "CONFIG_MAP":
            try:
                answer = await self._aws.call(
                    "ListAssociatedAccessPolicies",
                    "eks",
                    region,
                    lambda eks: eks.list_associated_access_policies(clusterName=name, principalArn=principal),
                )
                policies = list(answer.get("associatedAccessPolicies", []))
            except ComputeError as exc:
                if exc.code is not ErrorCode.NOT_FOUND:
                    raise
        problem = admin_access_problem(cluster, region, principal, policies)
        if problem is not None:
            raise ComputeError(ErrorCode.INVALID_STATE, problem, reason=NO_ADMIN_ACCESS_ENTRY)
        return await self._state(region, cluster)

    # -- vocabulary ------------------------------------------------------------------------

    async def _gpus_of(self, region: str, machine_type: str) -> GpuInfo | None:
        return (await self._types.describe(region, machine_type)).gpus

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        """EC2's vCPU quota of each instance family the needs grow, in the account's region (quota.py)."""
        return await vcpu_quotas(self._aws, self._types, str(self._config(account, "region")), needs)

    async def machine_gpus(self, account: ProviderAccount, machine_type: str) -> GpuInfo | None:
        return await self._gpus_of(str(self._config(account, "region")), machine_type)

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        """`nodes` multiplies by the zones the node group spans: the flavor's zones, else
        the Availability Zones of the account's subnets (as EC2 reported them, once read;
        the account's `zones` until then)."""
        if zones:
            return len(set(zones))
        subnets = [str(s) for s in account.config.get("eksSubnetIds") or ()]
        if subnets and all(s in self._subnet_zones for s in subnets):
            return len({self._subnet_zones[s] for s in subnets})
        return len(set(account.config.get("zones") or ())) or 1

    async def validate_substrate(
        self, account: ProviderAccount, substrate: Mapping[str, Any], *, path: str
    ) -> list[Problem]:
        region = str(account.config.get("region") or "")

        async def gpus_of(machine_type: str) -> GpuInfo | None:
            if not region:
                return None
            return await self._gpus_of(region, machine_type)

        problems = await substrate_problems(account.config, substrate, path, gpus_of)
        problems += await self._subnet_problems(account, region, f"{path}/account/config/eksSubnetIds")
        adopt = (substrate.get("cluster") or {}).get("adopt")
        if isinstance(adopt, str) and not problems:
            problems += await self._access_problems(account, adopt, f"{path}/cluster/adopt")
        return problems

    async def _access_problems(self, account: ProviderAccount, adopt_id: str, path: str) -> list[Problem]:
        """The plan says early what the substrate would: an adopted cluster without the admin access
        entry. Anything else (a cluster not there yet, a slow API) is the substrate's to report."""
        try:
            await self.read_adoptable(account, adopt_id)
        except ComputeError as exc:
            if exc.reason == NO_ADMIN_ACCESS_ENTRY:
                return [Problem(path, f"{NO_ADMIN_ACCESS_ENTRY}: {exc.message}")]
        return []

    async def _subnet_problems(self, account: ProviderAccount, region: str, path: str) -> list[Problem]:
        """The account's `zones` must be the Availability Zones of its subnets: `nodes`
        counts per zone of the subnets, and the driver counts them from the `zones`."""
        subnets = [str(s) for s in account.config.get("eksSubnetIds") or ()]
        if not region or not subnets:
            return []
        try:
            where = await self._zones_of(region, subnets)
        except ComputeError as exc:
            if exc.code is not ErrorCode.NOT_FOUND and exc.code is not ErrorCode.INVALID_INPUT:
                raise
            return [Problem(path, f"EC2 does not know the subnets {subnets} in {region}: {exc.message}")]
        zones = sorted(set(where.values()))
        declared = sorted(set(account.config.get("zones") or ()))
        if zones != declared:
            return [Problem(path, f"the account's subnets are in the zones {zones}; its zones list {declared}")]
        return []

    def close(self) -> None:
        self._aws.close()
