"""The EKS rest-json operations: clusters, node groups, updates and access entries.

Each handler checks its input the way EKS does, changes the `World`, and answers
the body EKS answers. Errors are `AwsError`s with EKS's codes and statuses.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.testing.eks.catalog import (
    ACCESS_POLICIES,
    ADMIN_POLICY_ARN,
    DEFAULT_VERSION,
    INSTANCE_TYPES,
    KUBERNETES_VERSIONS,
)
from better_compute.testing.eks.errors import AwsError
from better_compute.testing.eks.model import AccessEntry, Cluster, Nodegroup, Update, checked_tags
from better_compute.testing.eks.world import World

__all__ = ["Caller", "EksApi", "role_of"]

_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")

Body = dict[str, Any]


@dataclass(frozen=True)
class Caller:
    """The signed-in principal and the region its request was signed for."""

    principal_arn: str
    account_id: str
    region: str


def role_of(principal_arn: str) -> str:
    """An assumed-role session ARN names its role; access entries are made for the role."""
    if ":sts::" in principal_arn and ":assumed-role/" in principal_arn:
        account = principal_arn.split(":")[4]
        role = principal_arn.split(":assumed-role/")[1].split("/")[0]
        return f"arn:aws:iam::{account}:role/{role}"
    return principal_arn


def _minor_key(version: str) -> tuple[int, int]:
    major, minor = (int(x) for x in version.split(".")[:2])
    return major, minor


def _not_found(what: str, **fields: str) -> AwsError:
    return AwsError("ResourceNotFoundException", what, 404, fields=fields)


def _invalid(message: str, **fields: str) -> AwsError:
    return AwsError("InvalidParameterException", message, 400, fields=fields)


def _page(items: list[str], query: Mapping[str, str]) -> tuple[list[str], Body]:
    """One page of a List call: `maxResults` (1 to 100, default 100) from the opaque `nextToken`."""
    try:
        size = int(query.get("maxResults") or 100)
        start = int(query.get("nextToken") or "0", 16)
    except ValueError:
        raise _invalid("The nextToken or maxResults provided is invalid.") from None
    if not 1 <= size <= 100 or not 0 <= start <= len(items):
        raise _invalid("The nextToken or maxResults provided is invalid.")
    end = start + size
    return items[start:end], ({"nextToken": format(end, "x")} if end < len(items) else {})


class EksApi:
    """Routes `(method, path segments)` to an operation."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def handle(self, method: str, parts: list[str], query: Mapping[str, str], body: Body, who: Caller) -> Body:
        await self.world.settle()
        if parts == ["access-policies"] and method == "GET":
            names = sorted(ACCESS_POLICIES)
            page, token = _page(names, query)
            return {"accessPolicies": [{"name": n, "arn": ACCESS_POLICIES[n]} for n in page], **token}
        if parts == ["cluster-versions"] and method == "GET":
            return self.describe_cluster_versions(query)
        if parts == ["clusters"]:
            if method == "POST":
                return self.create_cluster(body, who)
            if method == "GET":
                page, token = _page(sorted(n for (r, n) in self.world.clusters if r == who.region), query)
                return {"clusters": page, **token}  # ListClusters pages as its other List calls do
        if len(parts) >= 2 and parts[0] == "clusters":
            cluster = self._cluster(who, parts[1])
            rest = parts[2:]
            route = (method, len(rest), rest[0] if rest else "")
            if route == ("GET", 0, ""):
                return {"cluster": cluster.wire()}
            if route == ("DELETE", 0, ""):
                return self.delete_cluster(cluster)
            if route == ("POST", 1, "updates"):
                return self.update_version(cluster, body)
            if route == ("GET", 1, "updates"):
                return self.list_updates(cluster, query)
            if route == ("GET", 2, "updates"):
                return self.describe_update(cluster, rest[1], query.get("nodegroupName"))
            if rest and rest[0] == "node-groups":
                return self._nodegroups(method, cluster, rest[1:], body, who)
            if rest and rest[0] == "access-entries":
                return self._access(method, cluster, rest[1:], body, query)
        raise AwsError("UnknownOperationException", f"no EKS operation {method} /{'/'.join(parts)}", 404)

    def _cluster(self, who: Caller, name: str) -> Cluster:
        cluster = self.world.cluster(who.region, name)
        if cluster is None:
            raise _not_found(f"No cluster found for name: {name}.", clusterName=name)
        return cluster

    # -- clusters --------------------------------------------------------------------------

    def create_cluster(self, body: Body, who: Caller) -> Body:
        name = body.get("name") or ""
        token = body.get("clientRequestToken")
        existing = self.world.cluster(who.region, name)
        if existing is not None:
            if token and existing.client_request_token == token:
                return {"cluster": existing.wire()}
            raise AwsError(
                "ResourceInUseException", f"Cluster already exists with name: {name}", 409, fields={"clusterName": name}
            )
        if not _NAME.match(name) or not body.get("roleArn"):
            raise _invalid(f"a cluster needs a roleArn and a name of 1-100 letters, digits, '-' and '_', not {name!r}")
        version = body.get("version") or DEFAULT_VERSION
        if version not in KUBERNETES_VERSIONS:
            raise _invalid(f"unsupported Kubernetes version {version}", clusterName=name)
        vpc = body.get("resourcesVpcConfig") or {}
        subnets = list(vpc.get("subnetIds") or [])
        self._check_subnets(subnets, who.region)
        if len({self.world.subnets[s] for s in subnets}) < 2:
            raise _invalid("Subnets specified must be in at least two different AZs", clusterName=name)
        quota = self.world.faults.cluster_quota
        if quota is not None and sum(1 for (r, _) in self.world.clusters if r == who.region) >= quota:
            raise AwsError(
                "ResourceLimitExceededException",
                f"Cluster limit exceeded for account {who.account_id} in {who.region} (quota {quota})",
                400,
                fields={"clusterName": name},
            )
        access = body.get("accessConfig") or {}
        mode = access.get("authenticationMode", "CONFIG_MAP")
        if mode not in ("API", "API_AND_CONFIG_MAP", "CONFIG_MAP"):
            raise _invalid(f"unknown authenticationMode {mode}")
        cluster = self.new_cluster(
            name=name,
            who=who,
            version=version,
            role_arn=body["roleArn"],
            subnets=subnets,
            private=bool(vpc.get("endpointPrivateAccess", False)),
            public=bool(vpc.get("endpointPublicAccess", True)),
            mode=mode,
            bootstrap=bool(access.get("bootstrapClusterCreatorAdminPermissions", True)),
            token=token,
        )
        cluster.tags = checked_tags(body.get("tags"))
        self.world.add_cluster(cluster, ready_in=self.world.timings.cluster_create)
        return {"cluster": cluster.wire()}

    def new_cluster(
        self,
        *,
        name: str,
        who: Caller,
        version: str,
        role_arn: str,
        subnets: list[str],
        private: bool,
        public: bool,
        mode: str,
        bootstrap: bool,
        token: str | None,
    ) -> Cluster:
        uid = str(uuid.uuid4())
        cluster = Cluster(
            name=name,
            region=who.region,
            account_id=who.account_id,
            arn=f"arn:aws:eks:{who.region}:{who.account_id}:cluster/{name}",
            uid=uid,
            version=version,
            role_arn=role_arn,
            subnet_ids=subnets,
            endpoint_private=private,
            endpoint_public=public,
            authentication_mode=mode,
            creator_arn=role_of(who.principal_arn),
            bootstrap_admin=bootstrap,
            created_at=self.world.clock.now(),
            client_request_token=token,
            kube_id=f"eks-{who.region}-{name}-{uid[:8]}",
        )
        if bootstrap and mode != "CONFIG_MAP":
            self.grant(cluster, cluster.creator_arn, ADMIN_POLICY_ARN)
        return cluster

    def grant(self, cluster: Cluster, principal: str, policy_arn: str | None) -> AccessEntry:
        entry = cluster.access_entries.get(principal)
        if entry is None:
            entry = AccessEntry(
                cluster=cluster.name,
                principal_arn=principal,
                arn=f"arn:aws:eks:{cluster.region}:{cluster.account_id}:access-entry/{cluster.name}/{uuid.uuid4()}",
                created_at=self.world.clock.now(),
            )
            cluster.access_entries[principal] = entry
        if policy_arn is not None:
            entry.policies[policy_arn] = {"accessScope": {"type": "cluster", "namespaces": []}}
        return entry

    def _check_subnets(self, subnets: list[str], region: str) -> None:
        if not subnets:
            raise _invalid("resourcesVpcConfig.subnetIds / subnets must name at least one subnet")
        for subnet in subnets:
            zone = self.world.subnets.get(subnet)
            if zone is None or not zone.startswith(region):
                raise _invalid(f"The subnet ID '{subnet}' does not exist")

    def delete_cluster(self, cluster: Cluster) -> Body:
        refused = self.world.faults.refused_deletes.get(cluster.name)
        if refused is not None:
            code, message = refused
            status = {"AccessDeniedException": 403, "ResourceInUseException": 409}.get(code, 400)
            raise AwsError(code, message, status, fields={"clusterName": cluster.name})
        if cluster.status == "DELETING":
            return {"cluster": cluster.wire()}
        if cluster.nodegroups:
            raise AwsError(
                "ResourceInUseException",
                f"Cluster has nodegroups attached: {', '.join(sorted(cluster.nodegroups))}",
                409,
                fields={"clusterName": cluster.name},
            )
        self.world.delete_cluster(cluster)
        return {"cluster": cluster.wire()}

    def update_version(self, cluster: Cluster, body: Body) -> Body:
        token = body.get("clientRequestToken")
        for update in cluster.updates.values():
            if token and update.client_request_token == token:
                return {"update": update.wire()}
        if cluster.status != "ACTIVE":
            raise AwsError(
                "ResourceInUseException",
                f"Cluster {cluster.name} is in {cluster.status} status",
                409,
                fields={"clusterName": cluster.name},
            )
        version = str(body.get("version", ""))
        if version not in KUBERNETES_VERSIONS:
            raise _invalid(f"unsupported Kubernetes version {version}", clusterName=cluster.name)
        major, minor = (int(x) for x in cluster.version.split("."))
        if version == cluster.version:
            raise _invalid(f"The cluster is already at version {version}", clusterName=cluster.name)
        if version != f"{major}.{minor + 1}":
            raise _invalid(
                f"Unsupported Kubernetes minor version update from {cluster.version} to {version}",
                clusterName=cluster.name,
            )
        update = Update(
            id=str(uuid.uuid4()),
            type="VersionUpdate",
            params=[("Version", version), ("PlatformVersion", "eks.1")],
            created_at=self.world.clock.now(),
            client_request_token=token,
        )
        cluster.updates[update.id] = update
        self.world.upgrade(cluster, update.id, version)
        return {"update": update.wire()}

    def list_updates(self, cluster: Cluster, query: Mapping[str, str]) -> Body:
        """The update ids of the cluster, or of one of its node groups (`nodegroupName`); no add-ons are modelled."""
        addon = query.get("addonName")
        if addon:
            raise _not_found(f"No addon: {addon} found in cluster: {cluster.name}", clusterName=cluster.name)
        nodegroup = query.get("nodegroupName")
        updates = self._nodegroup(cluster, nodegroup).updates if nodegroup else cluster.updates
        page, token = _page(list(updates), query)
        return {"updateIds": page, **token}

    def describe_update(self, cluster: Cluster, update_id: str, nodegroup: str | None) -> Body:
        updates = cluster.updates
        if nodegroup:
            updates = self._nodegroup(cluster, nodegroup).updates
        update = updates.get(update_id)
        if update is None:
            raise _not_found(f"No update found for ID: {update_id}", clusterName=cluster.name)
        return {"update": update.wire()}

    # -- node groups -----------------------------------------------------------------------

    def _nodegroup(self, cluster: Cluster, name: str) -> Nodegroup:
        group = cluster.nodegroups.get(name)
        if group is None:
            raise _not_found(f"No node group found for name: {name}.", clusterName=cluster.name, nodegroupName=name)
        return group

    def _nodegroups(self, method: str, cluster: Cluster, rest: list[str], body: Body, who: Caller) -> Body:
        if not rest and method == "POST":
            return self.create_nodegroup(cluster, body)
        if not rest and method == "GET":
            return {"nodegroups": sorted(cluster.nodegroups)}
        group = self._nodegroup(cluster, rest[0])
        if len(rest) == 1 and method == "GET":
            return {"nodegroup": group.wire()}
        if len(rest) == 1 and method == "DELETE":
            if group.status != "DELETING":
                self.world.delete_nodegroup(cluster, group)
            return {"nodegroup": group.wire()}
        if rest[1:] == ["update-config"] and method == "POST":
            return self.update_nodegroup(cluster, group, body)
        if rest[1:] == ["update-version"] and method == "POST":
            return self.update_nodegroup_version(cluster, group, body)
        raise AwsError("UnknownOperationException", f"no node group operation {method} {rest}", 404)

    def create_nodegroup(self, cluster: Cluster, body: Body, *, ready_in: float | None = None) -> Body:
        name = body.get("nodegroupName") or ""
        token = body.get("clientRequestToken")
        existing = cluster.nodegroups.get(name)
        if existing is not None:
            if token and existing.client_request_token == token:
                return {"nodegroup": existing.wire()}
            raise AwsError(
                "ResourceInUseException",
                f"NodeGroup already exists with name {name} and cluster name {cluster.name}",
                409,
                fields={"clusterName": cluster.name, "nodegroupName": name},
            )
        if cluster.status != "ACTIVE":
            raise AwsError(
                "InvalidRequestException",
                f"Cluster '{cluster.name}' is not in ACTIVE status",
                400,
                fields={"clusterName": cluster.name},
            )
        if not name or not body.get("nodeRole"):
            raise _invalid("nodegroupName and nodeRole are required", clusterName=cluster.name)
        subnets = list(body.get("subnets") or [])
        self._check_subnets(subnets, cluster.region)
        types = list(body.get("instanceTypes") or ["t3.medium"])
        if len(types) != 1 or types[0] not in INSTANCE_TYPES:
            raise _invalid(f"Instance type {types} is not supported in {cluster.region}", nodegroupName=name)
        scaling = body.get("scalingConfig") or {"minSize": 1, "maxSize": 2, "desiredSize": 2}
        low, high, want = (int(scaling.get(k, 0)) for k in ("minSize", "maxSize", "desiredSize"))
        self._check_scaling(low, high, want, name)
        quota = self.world.faults.nodegroup_quota
        if quota is not None and len(cluster.nodegroups) >= quota:
            raise AwsError(
                "ResourceLimitExceededException",
                f"Nodegroups per cluster limit exceeded (quota {quota})",
                400,
                fields={"clusterName": cluster.name, "nodegroupName": name},
            )
        for taint in body.get("taints") or []:
            if taint.get("effect") not in ("NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE"):
                raise _invalid(f"invalid taint effect {taint.get('effect')}", nodegroupName=name)
        launch_template, user_data = self._launch_template(body.get("launchTemplate"), name)
        zones: list[str] = []
        for subnet in subnets:
            if self.world.subnets[subnet] not in zones:
                zones.append(self.world.subnets[subnet])
        now = self.world.clock.now()
        group = Nodegroup(
            name=name,
            cluster=cluster.name,
            arn=f"arn:aws:eks:{cluster.region}:{cluster.account_id}:nodegroup/{cluster.name}/{name}/{uuid.uuid4()}",
            instance_type=types[0],
            capacity_type=body.get("capacityType", "ON_DEMAND"),
            ami_type=body.get("amiType", "AL2023_x86_64_STANDARD"),
            subnets=subnets,
            zones=zones,
            node_role=body["nodeRole"],
            version=body.get("version") or cluster.version,
            created_at=now,
            min_size=low,
            max_size=high,
            desired_size=want,
            disk_size=int(body.get("diskSize") or 20),
            labels=dict(body.get("labels") or {}),
            taints=list(body.get("taints") or []),
            client_request_token=token,
            launch_template=launch_template,
            user_data=user_data,
        )
        delay = self.world.timings.nodegroup_create if ready_in is None else ready_in
        self.world.add_nodegroup(cluster, group, ready_in=delay)
        return {"nodegroup": group.wire()}

    def _launch_template(self, asked: Body | None, group: str) -> tuple[dict[str, str] | None, str]:
        """CreateNodegroup's `launchTemplate` ({id} or {name}, version 1): what it names, and its user data."""
        if not asked:
            return None, ""
        templates = self.world.launch_templates.values()
        found = next((t for t in templates if t.id == asked.get("id") or t.name == asked.get("name")), None)
        if found is None or str(asked.get("version") or "1") != "1":
            raise _invalid(f"Launch template {asked.get('id') or asked.get('name')} not found", nodegroupName=group)
        try:
            user_data = base64.b64decode(found.user_data, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise _invalid("the launch template's user data is not base64", nodegroupName=group) from None
        return {"id": found.id, "name": found.name, "version": "1"}, user_data

    def _check_scaling(self, low: int, high: int, want: int, name: str) -> None:
        """EKS's refusals, in its words; an update that leaves out `desiredSize` is checked with the current one."""
        if low > want:
            raise _invalid(f"Minimum capacity {low} can't be greater than desired size {want}", nodegroupName=name)
        if want > high:
            raise _invalid("desiredSize can't be greater than maxSize", nodegroupName=name)
        if low < 0 or high < 1:
            raise _invalid(
                f"scalingConfig needs 0 <= minSize <= desiredSize <= maxSize and maxSize >= 1 "
                f"(got {low}/{want}/{high})",
                nodegroupName=name,
            )

    def update_nodegroup(self, cluster: Cluster, group: Nodegroup, body: Body) -> Body:
        token = body.get("clientRequestToken")
        for update in group.updates.values():
            if token and update.client_request_token == token:
                return {"update": update.wire()}
        if group.status not in ("ACTIVE", "DEGRADED"):
            raise AwsError(
                "ResourceInUseException",
                f"Nodegroup {group.name} is currently {group.status}",
                409,
                fields={"clusterName": cluster.name, "nodegroupName": group.name},
            )
        params: list[tuple[str, str]] = []
        scaling = body.get("scalingConfig")
        if scaling:
            low = int(scaling.get("minSize", group.min_size))
            high = int(scaling.get("maxSize", group.max_size))
            want = int(scaling.get("desiredSize", group.desired_size))
            self._check_scaling(low, high, want, group.name)
            group.min_size, group.max_size, group.desired_size = low, high, want
            params += [("MinSize", str(low)), ("MaxSize", str(high)), ("DesiredSize", str(want))]
        labels = body.get("labels") or {}
        for key, value in (labels.get("addOrUpdateLabels") or {}).items():
            group.labels[key] = value
            params.append(("LabelsToAdd", key))
        for key in labels.get("removeLabels") or []:
            group.labels.pop(key, None)
            params.append(("LabelsToRemove", key))
        if not params:
            raise _invalid("No changes needed", nodegroupName=group.name)
        update = Update(
            id=str(uuid.uuid4()),
            type="ConfigUpdate",
            params=params,
            created_at=self.world.clock.now(),
            client_request_token=token,
        )
        group.updates[update.id] = update
        self.world.resize(cluster, group, update.id)
        return {"update": update.wire()}

    def update_nodegroup_version(self, cluster: Cluster, group: Nodegroup, body: Body) -> Body:
        """UpdateNodegroupVersion: the node group moves to `version` (default: the cluster's), never past the
        cluster's; EKS rolls its instances, and the update is a `VersionUpdate` under the node group."""
        token = body.get("clientRequestToken")
        for update in group.updates.values():
            if token and update.client_request_token == token:
                return {"update": update.wire()}
        if body.get("launchTemplate"):
            raise _invalid("launch templates are not modelled by the emulator", nodegroupName=group.name)
        if group.status != "ACTIVE" or cluster.status != "ACTIVE":
            raise AwsError(
                "ResourceInUseException",
                f"Nodegroup {group.name} is currently {group.status}"
                if group.status != "ACTIVE"
                else f"Cluster {cluster.name} is currently {cluster.status}",
                409,
                fields={"clusterName": cluster.name, "nodegroupName": group.name},
            )
        version = str(body.get("version") or cluster.version)
        if version not in KUBERNETES_VERSIONS or _minor_key(version) > _minor_key(cluster.version):
            raise _invalid(
                f"Requested Nodegroup version {version} is invalid. Allowed versions are {cluster.version}",
                clusterName=cluster.name,
                nodegroupName=group.name,
            )
        if version == group.version:
            raise _invalid(f"Nodegroup {group.name} is already at version {version}", nodegroupName=group.name)
        update = Update(
            id=str(uuid.uuid4()),
            type="VersionUpdate",
            params=[("Version", version), ("ReleaseVersion", f"{KUBERNETES_VERSIONS[version]}-20260101")],
            created_at=self.world.clock.now(),
            client_request_token=token,
        )
        group.updates[update.id] = update
        self.world.upgrade_nodegroup(cluster, group, update.id, version)
        return {"update": update.wire()}

    def describe_cluster_versions(self, query: Mapping[str, str]) -> Body:
        """DescribeClusterVersions: the versions EKS supports, newest first (one page; the emulator has few)."""
        if query.get("clusterType", "eks") != "eks":
            raise _invalid(f"clusterType {query.get('clusterType')} is not supported")
        versions = sorted(KUBERNETES_VERSIONS, key=_minor_key, reverse=True)
        return {
            "clusterVersions": [
                {
                    "clusterVersion": v,
                    "clusterType": "eks",
                    "defaultPlatformVersion": "eks.1",
                    "defaultVersion": v == DEFAULT_VERSION,
                    "status": "STANDARD_SUPPORT",
                    "versionStatus": "STANDARD_SUPPORT",
                    "kubernetesPatchVersion": KUBERNETES_VERSIONS[v],
                }
                for v in versions
            ]
        }

    # -- access entries --------------------------------------------------------------------

    def _access(self, method: str, cluster: Cluster, rest: list[str], body: Body, query: Mapping[str, str]) -> Body:
        if cluster.authentication_mode == "CONFIG_MAP":
            raise AwsError(
                "InvalidRequestException",
                "The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] "
                "to perform this operation.",
                400,
                fields={"clusterName": cluster.name},
            )
        if not rest and method == "POST":
            principal = body.get("principalArn") or ""
            if principal in cluster.access_entries:
                raise AwsError(
                    "ResourceInUseException",
                    f"The specified access entry resource is already in use on this cluster: {principal}",
                    409,
                    fields={"clusterName": cluster.name},
                )
            if not principal.startswith("arn:aws:iam::"):
                raise _invalid(f"The principalArn {principal!r} is not an IAM user or role ARN")
            made = self.grant(cluster, principal, None)
            made.kubernetes_groups = list(body.get("kubernetesGroups") or [])
            made.username = body.get("username") or ""
            return {"accessEntry": made.wire()}
        if not rest and method == "GET":
            wanted = query.get("associatedPolicyArn")
            return {
                "accessEntries": sorted(
                    p for p, e in cluster.access_entries.items() if wanted is None or wanted in e.policies
                )
            }
        entry = cluster.access_entries.get(rest[0])
        if entry is None:
            raise _not_found(f"The specified principalArn could not be found: {rest[0]}", clusterName=cluster.name)
        if len(rest) == 1 and method == "GET":
            return {"accessEntry": entry.wire()}
        if len(rest) == 1 and method == "DELETE":
            del cluster.access_entries[rest[0]]
            return {}
        if rest[1:] == ["access-policies"] and method == "POST":
            policy = body.get("policyArn") or ""
            if policy not in ACCESS_POLICIES.values():
                raise _invalid(f"The policyArn {policy} is not a valid access policy ARN")
            scope = body.get("accessScope") or {"type": "cluster"}
            now = self.world.clock.now().timestamp()
            entry.policies[policy] = {
                "accessScope": {"type": scope.get("type", "cluster"), "namespaces": list(scope.get("namespaces") or [])}
            }
            return {
                "clusterName": cluster.name,
                "principalArn": entry.principal_arn,
                "associatedAccessPolicy": {
                    "policyArn": policy,
                    **entry.policies[policy],
                    "associatedAt": now,
                    "modifiedAt": now,
                },
            }
        if rest[1:] == ["access-policies"] and method == "GET":
            now = entry.created_at.timestamp()
            return {
                "clusterName": cluster.name,
                "principalArn": entry.principal_arn,
                "associatedAccessPolicies": [
                    {"policyArn": arn, **spec, "associatedAt": now, "modifiedAt": now}
                    for arn, spec in entry.policies.items()
                ],
            }
        raise AwsError("UnknownOperationException", f"no access entry operation {method} {rest}", 404)
