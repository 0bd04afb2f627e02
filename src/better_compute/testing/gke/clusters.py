"""The GKE emulator's clusters: create, delete and updateMaster as operations, the KubeCluster behind each, and
adoptable clusters seeded by tests (`seed_cluster`)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from better_compute.testing.gke.catalog import (
    REGION_ZONES,
    REGIONAL_DEFAULT_ZONES,
    VALID_MASTER_VERSIONS,
    kubernetes_version,
    region_of,
    resolve_version,
)
from better_compute.testing.gke.errors import GkeApiError
from better_compute.testing.gke.gpu_nodes import install_gpu_addons
from better_compute.testing.gke.identity import GoogleIdentity
from better_compute.testing.gke.labels import check_resource_labels
from better_compute.testing.gke.node_pools import NAME, NodePoolApi
from better_compute.testing.gke.operations import location_segment, project_number
from better_compute.testing.gke.state import API, ClusterRecord, OperationRecord
from better_compute.testing.gke.system import install_gke_system
from better_compute.testing.kube import KubeCluster

__all__ = ["CREATE_CLUSTER_SECONDS", "DELETE_CLUSTER_SECONDS", "UPGRADE_MASTER_SECONDS", "ClusterApi", "SeedPool"]

CREATE_CLUSTER_SECONDS = 300.0
DELETE_CLUSTER_SECONDS = 180.0
UPGRADE_MASTER_SECONDS = 600.0


@dataclass(frozen=True)
class SeedPool:
    """A node pool of a seeded (adoptable) cluster."""

    name: str
    machine_type: str = "e2-standard-4"
    node_count: int = 1
    labels: tuple[tuple[str, str], ...] = ()


class ClusterApi(NodePoolApi, GoogleIdentity):
    """Clusters: created (their control plane a KubeCluster), deleted, upgraded, and seeded for adoption."""

    def create_cluster(self, project: str, location: str, body: dict[str, Any]) -> OperationRecord:
        record = self._new_cluster(project, location, body.get("cluster") or {})
        op = self.new_operation(project, location, "CREATE_CLUSTER", f"clusters/{record.name}")
        if self.faults.unresponsive:
            op.status = "RUNNING"  # and so it stays: the control plane never comes up
            self._add_kube(record).unresponsive = True
            return op
        self.run_operation(op, CREATE_CLUSTER_SECONDS, lambda: self._bring_up(record), record.path, record)
        return op

    def _new_cluster(self, project: str, location: str, spec: dict[str, Any]) -> ClusterRecord:
        """Check a create request and record its cluster, PROVISIONING."""
        name = spec.get("name", "")
        if not NAME.match(name):
            raise GkeApiError(
                "INVALID_ARGUMENT",
                f'Invalid value for field "cluster.name": "{name}". Must be 1-40 characters: lower-case letters, '
                "digits and '-', starting with a letter and ending with a letter or a digit.",
            )
        region = region_of(location)
        if region is None:
            raise GkeApiError("INVALID_ARGUMENT", f'Location "{location}" does not exist.')
        path = f"projects/{project}/locations/{location}/clusters/{name}"
        if path in self.clusters:
            raise GkeApiError("ALREADY_EXISTS", f"Already exists: {path}.")
        locations = list(spec.get("locations") or [])
        for zone in locations:
            if zone not in REGION_ZONES[region]:
                raise GkeApiError("INVALID_ARGUMENT", f'Location "{zone}" is not a zone of region "{region}".')
        if not locations:
            locations = [location] if location != region else list(REGION_ZONES[region][:REGIONAL_DEFAULT_ZONES])
        elif location != region and location not in locations:
            raise GkeApiError("INVALID_ARGUMENT", f'Cluster locations must contain the cluster zone "{location}".')
        version = resolve_version(spec.get("initialClusterVersion"))
        if version is None:
            raise GkeApiError(
                "INVALID_ARGUMENT", f'Version "{spec.get("initialClusterVersion")}" is invalid or not supported.'
            )
        check_resource_labels(spec.get("resourceLabels") or {})
        pools = list(spec.get("nodePools") or [])
        if not pools and int(spec.get("initialNodeCount") or 0) > 0:
            pools = [{"name": "default-pool", "initialNodeCount": spec["initialNodeCount"], "config": {}}]
        if not pools:
            raise GkeApiError("INVALID_ARGUMENT", "Cluster.initial_node_count must be greater than zero.")
        record = ClusterRecord(
            project=project,
            location=location,
            name=name,
            id=secrets.token_hex(16),
            self_link=f"{API}/projects/{project_number(project)}/{location_segment(location)}/clusters/{name}",
            locations=locations,
            master_version=version,
            node_version=version,
            created_at=self.clock.now(),
            kube_id=f"gke-{project}-{location}-{name}-{secrets.token_hex(3)}",
            private_nodes=bool((spec.get("privateClusterConfig") or {}).get("enablePrivateNodes")),
            resource_labels=dict(spec.get("resourceLabels") or {}),
            beta_apis=list((spec.get("enableK8sBetaApis") or {}).get("enabledApis") or []),
        )
        for pool_body in pools:
            pool = self._pool_record(record, pool_body)
            record.node_pools[pool.name] = pool
        self._check_quota(project, region, list(record.node_pools.values()))
        self.clusters[path] = record
        return record

    def _add_kube(self, record: ClusterRecord) -> KubeCluster:
        kube = self.kube.add_cluster(record.kube_id, version=kubernetes_version(record.master_version))
        kube.enabled_apis.update(record.beta_apis)  # GKE turns on the beta APIs the cluster names, no others
        install_gke_system(kube)
        self._kube_ids.add(record.kube_id)
        kube.add_authenticator(self._review)
        kube.add_authorizer(self._authorize)
        install_gpu_addons(kube)
        record.endpoint = kube.endpoint.removeprefix("https://")
        record.ca_data = kube.ca_data
        return kube

    async def _bring_up(self, record: ClusterRecord) -> None:
        """The control plane comes up as a KubeCluster; then the node pools' Nodes join it."""
        self._add_kube(record)
        for pool in record.node_pools.values():
            await self.materialise(record, pool)
            pool.status = "RUNNING"
        record.status = "RUNNING"

    def delete_cluster(self, project: str, location: str, name: str) -> OperationRecord:
        record = self.cluster(project, location, name)
        if self.faults.refuse_delete:
            raise GkeApiError(
                "FAILED_PRECONDITION",
                f"Cluster {name} cannot be deleted: it is protected by a deletion policy of project {project}.",
            )
        if record.status == "STOPPING":
            raise GkeApiError("FAILED_PRECONDITION", f"Cluster {name} is currently being deleted.")
        self._abort_operations(record)
        record.status = "STOPPING"
        for pool in record.node_pools.values():
            pool.status = "STOPPING"
        op = self.new_operation(project, location, "DELETE_CLUSTER", f"clusters/{name}")

        async def delete() -> None:
            self.clusters.pop(record.path, None)
            if record.kube_id in self._kube_ids:
                self._kube_ids.discard(record.kube_id)
                self.kube.remove_cluster(record.kube_id)

        self.run_operation(op, DELETE_CLUSTER_SECONDS, delete, record.path + "#delete", record)
        return op

    def update_master(self, project: str, location: str, name: str, body: dict[str, Any]) -> OperationRecord:
        record = self.cluster(project, location, name)
        wanted = body.get("masterVersion", "")
        version = resolve_version(wanted)
        if version is None:
            raise GkeApiError("INVALID_ARGUMENT", f'Master version "{wanted}" is unsupported.')
        if VALID_MASTER_VERSIONS.index(version) > VALID_MASTER_VERSIONS.index(record.master_version):
            raise GkeApiError(
                "INVALID_ARGUMENT", f"Master cannot be downgraded from {record.master_version} to {version}."
            )
        if record.status != "RUNNING":
            self.refuse_if_busy(record.path)
            raise GkeApiError("FAILED_PRECONDITION", f"Cluster {name} is {record.status}; it cannot be upgraded now.")
        self.refuse_if_busy(record.path)
        record.status = "RECONCILING"
        op = self.new_operation(project, location, "UPGRADE_MASTER", f"clusters/{name}")

        async def upgrade() -> None:
            record.master_version = version
            record.status = "RUNNING"
            if record.kube_id in self._kube_ids:
                self.kube.cluster(record.kube_id).version = kubernetes_version(version)

        self.run_operation(op, UPGRADE_MASTER_SECONDS, upgrade, record.path, record)
        return op

    async def seed_cluster(
        self,
        name: str,
        *,
        project: str = "emulated-project",
        location: str = "us-central1",
        pools: tuple[SeedPool, ...] = (SeedPool("default-pool"),),
        version: str | None = None,
        locations: tuple[str, ...] = (),
        beta_apis: tuple[str, ...] = (),
    ) -> str:
        """A RUNNING cluster that someone else made, with its own node pools and Nodes, and the Kubernetes beta
        APIs `beta_apis` turned on (`group/version/resource`, as `enableK8sBetaApis`). Returns its adopt id."""
        body: dict[str, Any] = {
            "cluster": {
                "name": name,
                "initialClusterVersion": version or "",
                "enableK8sBetaApis": {"enabledApis": list(beta_apis)},
                "locations": list(locations),
                "nodePools": [
                    {
                        "name": p.name,
                        "initialNodeCount": p.node_count,
                        "config": {"machineType": p.machine_type, "labels": dict(p.labels)},
                    }
                    for p in pools
                ],
            }
        }
        record = self._new_cluster(project, location, body["cluster"])
        await self._bring_up(record)
        return f"{location}/{name}"
