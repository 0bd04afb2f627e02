"""The GKE emulator: container.googleapis.com v1 on a loopback port, backed by Kubernetes API emulator clusters.

    async with KubeApiServer(clock) as kube, GkeEmulator(clock, kube) as gke:
        provider = gcp_provider(endpoint=gke.url, credentials=gke.google_credentials(), clock=clock)

Every mutating call answers a container Operation (PENDING), which runs (RUNNING)
and ends (DONE, with `error` when it failed) as the injected clock advances. A
cluster is a `KubeCluster` whose endpoint and CA it reports; a node pool puts its
Nodes there, named like GKE's VM hostnames, `gke-<cluster>-<pool>-<8 hex>-<4 chars>`,
with the pool's labels, `cloud.google.com/gke-nodepool` and `nvidia.com/gpu` capacity.
`issued` lists the Google access tokens minted at the emulator's OAuth token endpoint
(valid an hour, as Google's are) and by the IAM Credentials API's `generateAccessToken`
for a service account of the project (valid its `lifetime`, 1 h at most, default 1 h);
each cluster's API server accepts them until they expire, as GKE accepts a Google identity
holding roles/container.admin on the project.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import secrets
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.oauth2.credentials import Credentials

from better_compute.core.clock import Clock
from better_compute.testing.gke.catalog import (
    ATTACHABLE_GPUS,
    MACHINE_TYPES,
    REGION_ZONES,
    REGIONAL_DEFAULT_ZONES,
    VALID_MASTER_VERSIONS,
    kubernetes_version,
    region_of,
    resolve_version,
)
from better_compute.testing.gke.compute import ComputeApiError, instance_group_manager_json
from better_compute.testing.gke.errors import GkeApiError, error_info, not_found
from better_compute.testing.gke.faults import GkeFaults
from better_compute.testing.gke.gpu_nodes import DRIVER_VERSIONS, gpu_node, install_gpu_addons
from better_compute.testing.gke.machines import operation_json, remove_instances
from better_compute.testing.gke.quotas import RegionQuotas
from better_compute.testing.gke.state import API, ClusterRecord, NodePoolRecord, OperationRecord
from better_compute.testing.gke.system import install_gke_system
from better_compute.testing.gke.updates import autoscaling_of, clamp_to_bounds
from better_compute.testing.kube import Attributes, KubeApiServer, KubeCluster, TokenReview
from better_compute.testing.lifecycle import StartStop
from better_compute.testing.loopback import LoopbackServer

__all__ = ["GkeEmulator", "SeedPool"]

CREATE_CLUSTER_SECONDS = 300.0
DELETE_CLUSTER_SECONDS = 180.0
UPGRADE_MASTER_SECONDS = 600.0
CREATE_NODE_POOL_SECONDS = 120.0
RESIZE_NODE_POOL_SECONDS = 60.0
DELETE_NODE_POOL_SECONDS = 60.0
TOKEN_LIFETIME_SECONDS = 3600
"""Google's OAuth access tokens live an hour; so does generateAccessToken's default and its maximum."""
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
IDENTITY = "better-compute@emulated-project.iam.gserviceaccount.com"

_SERVICE_ACCOUNT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$")
"""A service account of a project, as generateAccessToken names it."""
_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
_EFFECTS = {1: "NO_SCHEDULE", 2: "PREFER_NO_SCHEDULE", 3: "NO_EXECUTE"}
_KUBE_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


@dataclass(frozen=True)
class SeedPool:
    """A node pool of a seeded (adoptable) cluster."""

    name: str
    machine_type: str = "e2-standard-4"
    node_count: int = 1
    labels: tuple[tuple[str, str], ...] = ()


def _project_number(project: str) -> str:
    return str(int(hashlib.sha256(project.encode()).hexdigest()[:10], 16))


def _location_segment(location: str) -> str:
    """selfLinks name a zonal cluster's location `zones/<zone>` and a regional one `locations/<region>`."""
    return f"locations/{location}" if location in REGION_ZONES else f"zones/{location}"


def _suffix(length: int) -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(length))


def node_base_name(cluster: str, pool: str) -> str:
    """`gke-<cluster>-<pool>`, at most 40 characters: when both names do not fit, the longer is cut first,
    never below half of the room. The instance group's hash and the VM's suffix follow it."""
    room = 40 - len("gke--")
    if len(cluster) + len(pool) > room:
        cluster = cluster[: max(room - len(pool), room // 2)].rstrip("-")
        pool = pool[: room - len(cluster)].rstrip("-")
    return f"gke-{cluster}-{pool}"


class GkeEmulator(StartStop):
    """Emulated container.googleapis.com; see the module docstring."""

    def __init__(self, clock: Clock, kube: KubeApiServer) -> None:
        self.clock = clock
        self.kube = kube
        self.faults = GkeFaults()
        self.quotas = RegionQuotas()
        """The project's regional quotas (testing/gke/quotas.py): a test sets limits and usage here."""
        self.issued: list[str] = []
        self.clusters: dict[str, ClusterRecord] = {}
        self.operations: dict[str, OperationRecord] = {}
        self.requests: list[tuple[str, str]] = []
        self._tokens: dict[str, tuple[str, datetime]] = {}
        """token -> (whose it is, when it expires)."""
        self._refresh_token = "emu-refresh-" + secrets.token_urlsafe(16)
        self._busy: dict[str, str] = {}
        self._kube_ids: set[str] = set()
        self._working: set[asyncio.Task[None]] = set()
        self._running: dict[asyncio.Task[None], tuple[OperationRecord, str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        from better_compute.testing.gke.app import build_app

        self._server = LoopbackServer(build_app(self), name="gke")
        self.url = self._server.url

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._server.stop()

    # -- Google identity ---------------------------------------------------------------------

    def google_credentials(self) -> Credentials:
        """OAuth2 user credentials whose refresh mints an access token at this emulator's token endpoint."""
        return Credentials(  # type: ignore[no-untyped-call]
            token=None,
            refresh_token=self._refresh_token,
            token_uri=f"{self.url}/token",
            client_id="emulator-client",
            client_secret="emulator-secret",
            scopes=[SCOPE],
        )

    def mint_token(self, refresh_token: str) -> dict[str, Any]:
        if refresh_token != self._refresh_token:
            raise GkeApiError("UNAUTHENTICATED", "invalid_grant: Bad Request")
        token = "ya29.emu-" + secrets.token_urlsafe(32)
        self._tokens[token] = (IDENTITY, self.clock.now() + timedelta(seconds=TOKEN_LIFETIME_SECONDS))
        self.issued.append(token)
        return {"access_token": token, "expires_in": TOKEN_LIFETIME_SECONDS, "scope": SCOPE, "token_type": "Bearer"}

    def generate_access_token(self, authorization: str | None, account: str, body: Any) -> dict[str, Any]:
        """iamcredentials v1 `projects/-/serviceAccounts/{account}:generateAccessToken`: a token of a
        service account of the project, valid `lifetime` ("600s"; 1 h when absent, 1 h at most)."""
        self.authenticate(authorization)
        if not _SERVICE_ACCOUNT.match(account):
            raise GkeApiError("NOT_FOUND", f"Service account projects/-/serviceAccounts/{account} not found.")
        lifetime = (body or {}).get("lifetime") if isinstance(body, dict) else None
        seconds = TOKEN_LIFETIME_SECONDS
        if lifetime is not None:
            match = re.fullmatch(r"(\d+)(?:\.\d+)?s", str(lifetime))
            if match is None or not 1 <= int(match[1]) <= TOKEN_LIFETIME_SECONDS:
                raise GkeApiError(
                    "INVALID_ARGUMENT",
                    f"Invalid value at 'lifetime' ({lifetime}): the lifetime must be between 1s and 3600s",
                )
            seconds = int(match[1])
        if not (body or {}).get("scope"):
            raise GkeApiError("INVALID_ARGUMENT", "Scope required.")
        token = "ya29.emu-sa-" + secrets.token_urlsafe(32)
        expires = self.clock.now() + timedelta(seconds=seconds)
        self._tokens[token] = (account, expires)
        self.issued.append(token)
        return {"accessToken": token, "expireTime": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def authenticate(self, authorization: str | None) -> None:
        token = (authorization or "").removeprefix("Bearer ").strip()
        if token not in self._tokens:  # the SDK refreshes by the wall clock, which the emulator's need not follow
            raise GkeApiError(
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential.",
            )

    def _review(self, token: str) -> TokenReview | None:
        """What a cluster's API server learns of a bearer token: a Google identity of this project."""
        held = self._tokens.get(token)
        if held is None:
            return None
        subject, expires = held
        return TokenReview(subject=subject, groups=("system:authenticated",), expires_at=expires)

    @staticmethod
    def _authorize(user: TokenReview, attributes: Attributes) -> str | None:
        """GKE's IAM authorizer (after RBAC): the project's owner, and its service accounts (granted
        roles/container.admin), may do anything in its clusters."""
        if user.subject == IDENTITY:
            return "GKE IAM: roles/owner on the project"
        return "GKE IAM: roles/container.admin on the project" if _SERVICE_ACCOUNT.match(user.subject) else None

    def throttled(self) -> GkeApiError | None:
        if self.faults.throttle <= 0:
            return None
        self.faults.throttle -= 1
        delay = self.faults.throttle_retry_after
        return GkeApiError(
            "RESOURCE_EXHAUSTED",
            "Quota exceeded for quota metric 'Mutating requests' and limit 'Mutating requests per minute' "
            "of service 'container.googleapis.com'.",
            details=[
                error_info("RATE_LIMIT_EXCEEDED", "googleapis.com", service="container.googleapis.com"),
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay}s"},
            ],
            headers={"Retry-After": str(delay)},
        )

    # -- lookups -----------------------------------------------------------------------------

    def cluster(self, project: str, location: str, name: str) -> ClusterRecord:
        record = self.clusters.get(f"projects/{project}/locations/{location}/clusters/{name}")
        if record is None:
            raise not_found(f"projects/{project}/locations/{location}/clusters/{name}")
        return record

    def node_pool(self, project: str, location: str, name: str, pool: str) -> tuple[ClusterRecord, NodePoolRecord]:
        record = self.cluster(project, location, name)
        found = record.node_pools.get(pool)
        if found is None:
            raise not_found(f"{record.path}/nodePools/{pool}")
        return record, found

    def kube_cluster(self, location: str, name: str, project: str | None = None) -> KubeCluster:
        """The Kubernetes API emulator cluster behind a GKE cluster (any project when not given)."""
        for record in self.clusters.values():
            if record.location == location and record.name == name and project in (None, record.project):
                return self.kube.cluster(record.kube_id)
        raise KeyError(f"{location}/{name}")

    def operation(self, project: str, location: str, name: str) -> OperationRecord:
        op = self.operations.get(name)
        if op is None or op.project != project:
            raise not_found(f"projects/{project}/locations/{location}/operations/{name}")
        return op

    def server_config(self) -> dict[str, Any]:
        return {
            "defaultClusterVersion": resolve_version(None),
            "validMasterVersions": list(VALID_MASTER_VERSIONS),
            "validNodeVersions": list(VALID_MASTER_VERSIONS),
            "defaultImageType": "COS_CONTAINERD",
            "validImageTypes": ["COS_CONTAINERD", "UBUNTU_CONTAINERD"],
        }

    # -- operations --------------------------------------------------------------------------

    def new_operation(self, project: str, location: str, kind: str, target: str) -> OperationRecord:
        name = f"operation-{int(self.clock.now().timestamp() * 1000)}-{secrets.token_hex(4)}"
        segment = f"projects/{_project_number(project)}/{_location_segment(location)}"
        op = OperationRecord(
            name=name,
            project=project,
            location=location,
            operation_type=kind,
            target_link=f"{API}/{segment}/{target}",
            self_link=f"{API}/{segment}/operations/{name}",
            started_at=self.clock.now(),
        )
        self.operations[name] = op
        return op

    def run_operation(
        self,
        op: OperationRecord,
        seconds: float,
        work: Callable[[], Awaitable[None]],
        busy: str,
        cluster: ClusterRecord,
    ) -> None:
        """Run `work` after `seconds` of the clock as operation `op`; `busy` is held until it ends."""
        self._busy[busy] = op.name

        async def run() -> None:
            try:
                await asyncio.sleep(0)
                op.status = "RUNNING"
                await self.clock.sleep(seconds)
                self._working.add(task)
                try:
                    await work()
                except GkeApiError as exc:
                    op.error = exc.rpc_status()
                except Exception as exc:  # the emulator's own fault: Google reports an INTERNAL error
                    op.error = {"code": 13, "message": f"Internal error: {type(exc).__name__}: {exc}"}
            finally:
                self._working.discard(task)
                if self._busy.get(busy) == op.name:
                    del self._busy[busy]
            op.status = "DONE"
            op.ended_at = self.clock.now()

        task = asyncio.create_task(run(), name=f"gke:{op.operation_type}:{op.name}")
        self._tasks.add(task)
        self._running[task] = (op, cluster.path)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: self._running.pop(done, None))

    async def settle(self) -> None:
        """Let every operation that the clock has made due finish its work (tests call it after advancing)."""
        for _ in range(5):
            await asyncio.sleep(0)
        while self._working:
            await asyncio.wait(set(self._working))
            for _ in range(5):
                await asyncio.sleep(0)

    def _abort_operations(self, cluster: ClusterRecord) -> None:
        """A cluster being deleted ends its other operations, each with an error."""
        for task, (op, path) in list(self._running.items()):
            if path == cluster.path:
                task.cancel()
                op.status = "DONE"
                op.ended_at = self.clock.now()
                op.error = {"code": 1, "message": f"Operation {op.name} was cancelled: the cluster is being deleted."}

    def refuse_if_busy(self, key: str) -> None:
        running = self._busy.get(key)
        if running is not None:
            raise GkeApiError(
                "FAILED_PRECONDITION",
                f"Cluster is running incompatible operation {running}. Please wait and try again once it is done.",
            )

    # -- clusters ----------------------------------------------------------------------------

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
        if not _NAME.match(name):
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
            self_link=f"{API}/projects/{_project_number(project)}/{_location_segment(location)}/clusters/{name}",
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

    # -- node pools --------------------------------------------------------------------------

    def _pool_record(self, record: ClusterRecord, body: dict[str, Any]) -> NodePoolRecord:
        name = body.get("name", "")
        if not _NAME.match(name):
            raise GkeApiError("INVALID_ARGUMENT", f'Invalid value for field "node_pool.name": "{name}".')
        config = body.get("config") or {}
        machine_name = config.get("machineType") or "e2-medium"
        machine = MACHINE_TYPES.get(machine_name)
        if machine is None:
            raise GkeApiError("INVALID_ARGUMENT", f'Invalid machine type "{machine_name}".')
        gpu_type, gpu_count = machine.gpu_type, machine.gpu_count
        driver_version = None
        for accel in config.get("accelerators") or []:
            driver_version = (accel.get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
            if isinstance(driver_version, int) and 0 <= driver_version < len(DRIVER_VERSIONS):
                driver_version = DRIVER_VERSIONS[driver_version]  # the REST transport sends enums as numbers
            if driver_version is not None and driver_version not in DRIVER_VERSIONS:
                raise GkeApiError(
                    "INVALID_ARGUMENT",
                    f'Invalid value for field "node_pool.config.accelerators[0].gpu_driver_installation_config'
                    f'.gpu_driver_version": "{driver_version}".',
                )
            asked_type = accel.get("acceleratorType", "")
            asked_count = int(accel.get("acceleratorCount") or 0)
            if gpu_type is not None:
                if asked_type != gpu_type or asked_count not in (0, gpu_count):
                    raise GkeApiError(
                        "INVALID_ARGUMENT",
                        f"Machine type {machine_name} comes with {gpu_count} x {gpu_type}; "
                        f"{asked_count} x {asked_type} was requested.",
                    )
            elif machine_name.startswith("n1-") and asked_type in ATTACHABLE_GPUS and asked_count in (1, 2, 4, 8):
                gpu_type, gpu_count = asked_type, asked_count
            else:
                raise GkeApiError(
                    "INVALID_ARGUMENT", f"Accelerator {asked_type} cannot be attached to machine type {machine_name}."
                )
        region = region_of(record.location) or record.location
        locations = list(body.get("locations") or record.locations)
        for zone in locations:
            if zone not in REGION_ZONES.get(region, ()):
                raise GkeApiError("INVALID_ARGUMENT", f'Location "{zone}" is not a zone of region "{region}".')
        count = int(body.get("initialNodeCount") or 0)
        if count < 0:
            raise GkeApiError("INVALID_ARGUMENT", "node_pool.initial_node_count must be non-negative.")
        taints = []
        for taint in config.get("taints") or []:
            effect = taint.get("effect", "NO_SCHEDULE")
            effect = _EFFECTS.get(effect, "NO_SCHEDULE") if isinstance(effect, int) else effect
            taints.append({"key": taint.get("key", ""), "value": taint.get("value", ""), "effect": effect})
        autoscaling = autoscaling_of(body.get("autoscaling"), "node_pool.autoscaling")
        return NodePoolRecord(
            name=name,
            machine_type=machine_name,
            initial_node_count=count,
            locations=locations,
            version=record.node_version,
            self_link=f"{record.self_link}/nodePools/{name}",
            labels=dict(config.get("labels") or {}),
            taints=taints,
            spot=bool(config.get("spot")),
            disk_size_gb=int(config.get("diskSizeGb") or 100),
            gpu_type=gpu_type,
            gpu_count=gpu_count,
            gpu_driver_version=driver_version,
            autoscaling=autoscaling,
            group_hash={zone: secrets.token_hex(4) for zone in locations},
            targets=clamp_to_bounds(autoscaling, {zone: count for zone in locations}),
            project=record.project,
            base_name=node_base_name(record.name, name),
        )

    def _check_quota(self, project: str, region: str, pools: list[NodePoolRecord]) -> None:
        if not self.faults.quota_exceeded:
            return
        gpu_pools = [p for p in pools if p.gpu_type]
        resource = (gpu_pools[0].gpu_type or "").upper().replace("-", "_") + "_GPUS" if gpu_pools else "CPUS"
        wanted = sum(sum(p.targets.values()) * max(p.gpu_count, 1) for p in pools)
        raise GkeApiError(
            "PERMISSION_DENIED",
            f'Insufficient regional quota to satisfy request: resource "{resource}": request requires '
            f"'{wanted}.0' and is short '{wanted}.0'. project has a quota of '0.0' with '0.0' available. "
            f"View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={project}.",
        )

    def create_node_pool(self, project: str, location: str, name: str, body: dict[str, Any]) -> OperationRecord:
        record = self.cluster(project, location, name)
        pool = self._pool_record(record, body.get("nodePool") or {})
        if pool.name in record.node_pools:
            raise GkeApiError("ALREADY_EXISTS", f"Already exists: {record.path}/nodePools/{pool.name}.")
        self.refuse_if_busy(record.path)
        if record.status != "RUNNING":
            raise GkeApiError("FAILED_PRECONDITION", f"Cluster {name} is {record.status}; try again once it is done.")
        self._check_quota(project, region_of(location) or location, [pool])
        record.node_pools[pool.name] = pool
        op = self.new_operation(project, location, "CREATE_NODE_POOL", f"clusters/{name}/nodePools/{pool.name}")

        async def provision() -> None:
            if pool.machine_type in self.faults.stockout:
                zone = pool.locations[0]
                message = (
                    f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
                    f"fulfill the request. '(resource type:compute)'. ZONE_RESOURCE_POOL_EXHAUSTED: "
                    f"a {pool.machine_type} VM instance is currently unavailable in the {zone} zone."
                )
                pool.status = "ERROR"
                pool.status_message = message
                pool.conditions = [{"code": "GCE_STOCKOUT", "message": message, "canonicalCode": "RESOURCE_EXHAUSTED"}]
                raise GkeApiError("RESOURCE_EXHAUSTED", message, details=[error_info("GCE_STOCKOUT")])
            await self.materialise(record, pool)
            pool.status = "RUNNING"

        self.run_operation(op, CREATE_NODE_POOL_SECONDS, provision, pool.self_link, record)
        return op

    def pool_for_change(self, project: str, location: str, name: str, pool_name: str) -> NodePoolRecord:
        record, pool = self.node_pool(project, location, name, pool_name)
        self.refuse_if_busy(record.path)
        self.refuse_if_busy(pool.self_link)
        if pool.status != "RUNNING":
            raise GkeApiError("FAILED_PRECONDITION", f"Node pool {pool_name} is {pool.status}; it cannot change now.")
        return pool

    def set_size(self, project: str, location: str, name: str, pool_name: str, body: dict[str, Any]) -> OperationRecord:
        pool = self.pool_for_change(project, location, name, pool_name)
        record = self.cluster(project, location, name)
        count = int(body.get("nodeCount") or 0)
        if count < 0:
            raise GkeApiError("INVALID_ARGUMENT", "node_count must be non-negative.")
        op = self.new_operation(project, location, "SET_NODE_POOL_SIZE", f"clusters/{name}/nodePools/{pool_name}")

        async def resize() -> None:
            pool.targets = {zone: count for zone in pool.locations}
            await self.materialise(record, pool)

        self.run_operation(op, RESIZE_NODE_POOL_SECONDS, resize, pool.self_link, record)
        return op

    def set_autoscaling(
        self, project: str, location: str, name: str, pool_name: str, body: dict[str, Any]
    ) -> OperationRecord:
        pool = self.pool_for_change(project, location, name, pool_name)
        autoscaling = autoscaling_of(body.get("autoscaling"), "autoscaling")
        op = self.new_operation(project, location, "SET_NODE_POOL_MANAGEMENT", f"clusters/{name}/nodePools/{pool_name}")

        record = self.cluster(project, location, name)

        async def apply() -> None:
            pool.autoscaling = autoscaling
            await self.autoscale_pool(record, pool, pool.targets)

        self.run_operation(op, RESIZE_NODE_POOL_SECONDS, apply, pool.self_link, record)
        return op

    async def autoscale_pool(self, record: ClusterRecord, pool: NodePoolRecord, wanted: dict[str, int]) -> None:
        """The cluster autoscaler: each zone's target moves to what is wanted, within the pool's bounds."""
        wanted = clamp_to_bounds(pool.autoscaling, {zone: wanted.get(zone, 0) for zone in pool.locations})
        pool.targets = wanted
        await self.materialise(record, pool)

    async def autoscale(
        self, location: str, name: str, pool_name: str, nodes_per_zone: int, project: str | None = None
    ) -> dict[str, int]:
        """Demand asks the autoscaler for `nodes_per_zone`; it moves the instance groups' targetSize within the
        pool's bounds (the node pool's `initialNodeCount` stays). Returns the targets per zone."""
        for record in self.clusters.values():
            if record.location == location and record.name == name and project in (None, record.project):
                pool = record.node_pools.get(pool_name)
                if pool is None or pool.autoscaling is None:
                    raise ValueError(f"{pool_name} is not an autoscaled node pool of {location}/{name}")
                await self.autoscale_pool(record, pool, {zone: nodes_per_zone for zone in pool.locations})
                return dict(pool.targets)
        raise KeyError(f"{location}/{name}")

    def _group(self, project: str, zone: str, group: str, permission: str) -> tuple[ClusterRecord, NodePoolRecord]:
        """The cluster and node pool whose managed instance group in `zone` is `group`."""
        resource = f"projects/{project}/zones/{zone}/instanceGroupManagers/{group}"
        if self.faults.compute_denied:
            raise ComputeApiError(403, "forbidden", f"Required '{permission}' permission for '{resource}'")
        for record in self.clusters.values():
            for pool in record.node_pools.values():
                if pool.project == project and zone in pool.locations and pool.group_name(zone) == group:
                    return record, pool
        raise ComputeApiError(404, "notFound", f"The resource '{resource}' was not found")

    def region(self, project: str, region: str) -> dict[str, Any]:
        """Compute Engine's regions.get: the region with its quotas (testing/gke/quotas.py)."""
        return self.quotas.region(
            project,
            region,
            self.clusters.values(),
            denied=self.faults.compute_denied,
            disabled=self.faults.compute_disabled,
        )

    def instance_group_manager(self, project: str, zone: str, group: str) -> dict[str, Any]:
        """A node pool's managed instance group in `zone`, as Compute Engine's instanceGroupManagers.get answers."""
        record, pool = self._group(project, zone, group, "compute.instanceGroupManagers.get")
        return instance_group_manager_json(record, pool, zone)

    def remove_instances(
        self, project: str, zone: str, group: str, body: dict[str, Any], *, recreate: bool
    ) -> dict[str, Any]:
        """instanceGroupManagers.deleteInstances or .recreateInstances (testing/gke/machines.py)."""
        record, pool = self._group(project, zone, group, "compute.instanceGroupManagers.update")
        if pool.status == "STOPPING":
            raise ComputeApiError(
                400, "resourceNotReady", f"The resource '{pool.group_url(zone)}' is not ready: it is being deleted."
            )
        remove_instances(self, record, pool, zone, body, recreate=recreate)
        kind = "recreateInstances" if recreate else "deleteInstances"
        name = f"operation-{int(self.clock.now().timestamp() * 1000)}-{secrets.token_hex(8)}"
        return operation_json(self, project, zone, pool.group_url(zone), f"compute.instanceGroupManagers.{kind}", name)

    def run_later(self, seconds: float, work: Callable[[], Awaitable[None]], name: str) -> None:
        """Run `work` once `seconds` of the clock have passed (`settle` waits for it once due)."""

        async def run() -> None:
            await self.clock.sleep(seconds)
            self._working.add(task)
            try:
                await work()
            finally:
                self._working.discard(task)

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def delete_node_pool(self, project: str, location: str, name: str, pool_name: str) -> OperationRecord:
        record, pool = self.node_pool(project, location, name, pool_name)
        self.refuse_if_busy(record.path)
        self.refuse_if_busy(pool.self_link)
        if pool.status == "STOPPING":
            raise GkeApiError("FAILED_PRECONDITION", f"Node pool {pool_name} is currently being deleted.")
        pool.status = "STOPPING"
        op = self.new_operation(project, location, "DELETE_NODE_POOL", f"clusters/{name}/nodePools/{pool_name}")

        async def delete() -> None:
            pool.targets = {zone: 0 for zone in pool.locations}
            await self.materialise(record, pool)
            record.node_pools.pop(pool_name, None)

        self.run_operation(op, DELETE_NODE_POOL_SECONDS, delete, pool.self_link + "#delete", record)
        return op

    # -- Nodes -------------------------------------------------------------------------------

    async def materialise(self, record: ClusterRecord, pool: NodePoolRecord) -> None:
        """Make the pool's Nodes in its cluster match its instance groups' target sizes."""
        kube = self.kube.cluster(record.kube_id)
        for zone in pool.locations:
            names = pool.nodes.setdefault(zone, [])
            target = pool.targets.get(zone, 0)
            while len(names) > target:
                await kube.kubelet.remove_node(names.pop())
            while len(names) < target:
                node = f"{pool.base_name}-{pool.group_hash[zone]}-{_suffix(4)}"
                await self.add_vm(record, pool, zone, node)
                names.append(node)

    async def add_vm(self, record: ClusterRecord, pool: NodePoolRecord, zone: str, node: str) -> None:
        """The VM `node` of the pool in `zone` registers its Node."""
        region = region_of(record.location) or record.location
        labels = {
            **pool.labels,
            "cloud.google.com/gke-nodepool": pool.name,
            "cloud.google.com/gke-os-distribution": "cos",
            "node.kubernetes.io/instance-type": pool.machine_type,
            "topology.kubernetes.io/region": region,
            "topology.kubernetes.io/zone": zone,
            "kubernetes.io/hostname": node,
        }
        machine = MACHINE_TYPES[pool.machine_type]
        capacity = {"cpu": str(machine.vcpus), "memory": f"{machine.memory_mib}Mi"}
        taints = [{"key": t["key"], "value": t["value"], "effect": _KUBE_EFFECTS[t["effect"]]} for t in pool.taints]
        if pool.spot:
            labels["cloud.google.com/gke-spot"] = "true"
        gpus = None
        if pool.gpu_type:
            gpus = gpu_node(pool.gpu_type, pool.gpu_count, pool.gpu_driver_version, labels, taints)
        await self.kube.cluster(record.kube_id).kubelet.add_node(
            node,
            labels=labels,
            capacity=capacity,
            taints=taints,
            provider_id=f"gce://{record.project}/{zone}/{node}",
            version=pool.version,
            gpus=gpus,
        )

    async def reclaim_spot(
        self, location: str, name: str, pool_name: str, project: str | None = None, *, recreate: bool = False
    ) -> str:
        """Google reclaims one Spot VM of the pool: its Node leaves the cluster. Returns the Node's name.

        `recreate`: the managed instance group recreates the VM under its name, as GCE does for a
        preempted instance: a fresh boot disk, and a new Node object (a new uid) of the same name."""
        for record in self.clusters.values():
            if record.location == location and record.name == name and project in (None, record.project):
                pool = record.node_pools.get(pool_name)
                if pool is None or not pool.spot:
                    raise ValueError(f"{pool_name} is not a Spot node pool of {location}/{name}")
                for zone, names in pool.nodes.items():
                    if names:
                        node = names.pop()
                        await self.kube.cluster(record.kube_id).kubelet.remove_node(node)
                        if recreate:
                            await self.add_vm(record, pool, zone, node)
                            names.append(node)
                        return node
                raise ValueError(f"Spot node pool {pool_name} has no Nodes")
        raise KeyError(f"{location}/{name}")

    def make_unresponsive(self, location: str, name: str) -> None:
        """The cluster's control plane stops answering."""
        self.kube_cluster(location, name).unresponsive = True

    # -- adoptable clusters ------------------------------------------------------------------

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
