"""`GkeKubernetes`: the GKE driver, on google-cloud-container's REST transport.

A node pool's current size is not in the container API (its `initialNodeCount` stays
at the created size after a resize). As real clients do, the driver reads the pool's
`instanceGroupUrls` and then each managed instance group's `targetSize` through
google-cloud-compute's REST transport (instance_groups.py); their sum over the zones is the size.

Every blocking SDK call runs in the driver's own bounded thread pool, with the
SDK's retries off (`retry=None`): the reconcile engine alone decides when to try
again. A mutating call answers a container Operation; the driver reads it once
(`operations/{name}`) to report an operation that already failed, and otherwise
returns the current state (PROVISIONING, UPDATING, ...) for the reconciler to
come back to. Nothing here sleeps.

Clusters are addressed as `<location>/<name>` in the account's `projectId`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import google.auth
import google.auth.credentials
import requests
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import impersonated_credentials
from google.auth.transport.requests import Request
from google.cloud import container_v1

from better_compute.core.clock import Clock, SystemClock
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.provider import (
    CREDENTIAL_TTL_SECONDS,
    Autoscaling,
    ClusterCredentials,
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    GpuInfo,
    NodePoolSpec,
    NodePoolState,
    Quota,
    QuotaNeed,
    version_matches,
)
from better_compute.providers.gcp import shapes
from better_compute.providers.gcp.errors import google_errors, operation_error, pool_error
from better_compute.providers.gcp.instance_groups import InstanceGroups
from better_compute.providers.gcp.quota import RegionQuotas, gpu_needs, region_quotas
from better_compute.providers.gcp.validate import validate_substrate
from better_compute.providers.gcp.vocabulary import (
    GPU_MODELS,
    MACHINE_GPUS,
    REGIONAL_DEFAULT_NODE_ZONES,
    VOCABULARY,
    region_of,
)
from better_compute.vps.provider import ProviderAccount

__all__ = ["GkeKubernetes"]

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
CALL_TIMEOUT_SECONDS = 30.0
T = TypeVar("T")


class GkeKubernetes:
    """`ProviderKubernetes` for GKE."""

    vocabulary = VOCABULARY

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        credentials: google.auth.credentials.Credentials | None = None,
        max_workers: int = 8,
        clock: Clock | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._credentials = credentials
        self._clock = clock or SystemClock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="gke")
        self._lock = threading.Lock()
        self._client: container_v1.ClusterManagerClient | None = None
        self._groups = InstanceGroups(self._google_credentials, endpoint, CALL_TIMEOUT_SECONDS)
        self._regions = RegionQuotas(self._google_credentials, endpoint, CALL_TIMEOUT_SECONDS)
        self._auth_session: requests.Session | None = None

    # -- plumbing ----------------------------------------------------------------------------

    def _google_credentials(self) -> google.auth.credentials.Credentials:
        with self._lock:
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=[SCOPE])
            return self._credentials

    def _api(self) -> container_v1.ClusterManagerClient:
        credentials = self._google_credentials()
        with self._lock:
            if self._client is None:
                options = ClientOptions(api_endpoint=self._endpoint) if self._endpoint else None
                self._client = container_v1.ClusterManagerClient(
                    credentials=credentials, transport="rest", client_options=options
                )
            return self._client

    async def _call(self, what: str, fn: Callable[[container_v1.ClusterManagerClient], T]) -> T:
        def run() -> T:
            with google_errors(what):
                return fn(self._api())

        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    def close(self) -> None:
        """Close the SDK's HTTP sessions and the thread pool."""
        with self._lock:
            if self._client is not None:
                self._client.transport.close()  # type: ignore[no-untyped-call]
                self._client = None
            if self._auth_session is not None:
                self._auth_session.close()
                self._auth_session = None
        self._groups.close()
        self._regions.close()
        self._pool.shutdown(wait=True)

    @staticmethod
    def _project(account: ProviderAccount) -> str:
        project = account.config.get("projectId")
        if not isinstance(project, str) or not project:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"provider account {account.name} has no config.projectId")
        return project

    def _cluster_path(self, account: ProviderAccount, cluster_id: str) -> str:
        location, name = shapes.split_cluster_id(cluster_id)
        if not location or not name:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"a GKE cluster id is <location>/<name>, not {cluster_id!r}")
        return f"projects/{self._project(account)}/locations/{location}/clusters/{name}"

    @staticmethod
    def _check_operation(
        api: container_v1.ClusterManagerClient, path: str, op: container_v1.Operation, what: str
    ) -> None:
        """Read the operation once (no waiting); raise its error when it already failed."""
        project = path.split("/")[1]
        name = f"projects/{project}/locations/{op.location or op.zone}/operations/{op.name}"
        latest = api.get_operation(request={"name": name}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
        if latest.status == container_v1.Operation.Status.DONE and latest.error.code:
            raise operation_error(what, latest.error)

    def _read_cluster(self, api: container_v1.ClusterManagerClient, path: str) -> container_v1.Cluster | None:
        try:
            return api.get_cluster(request={"name": path}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
        except gexc.NotFound:
            return None

    def _read_pool(self, api: container_v1.ClusterManagerClient, path: str) -> container_v1.NodePool | None:
        try:
            return api.get_node_pool(request={"name": path}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
        except gexc.NotFound:
            return None

    def _pool_state(self, pool: container_v1.NodePool) -> NodePoolState:
        """The pool's state, its size read from its instance groups' `targetSize` (rounded up to whole nodes
        per zone when the autoscaler has made the zones differ). A pool without instance groups yet is still
        being made at its initial size; a group already gone counts no nodes."""
        urls = list(pool.instance_group_urls)
        if not urls:
            return shapes.node_pool_state(pool, pool.initial_node_count)
        return shapes.node_pool_state(pool, -(-self._groups.size(urls) // len(urls)))

    def _node_zones(self, account: ProviderAccount, location: str) -> tuple[str, ...]:
        """The account's zones that belong to the cluster's location (its node zones), if any."""
        region = region_of(location)
        zones = tuple(z for z in account.config.get("zones") or () if isinstance(z, str) and region_of(z) == region)
        if zones and location != region and location not in zones:
            zones = (location, *zones)
        return zones

    # -- clusters ----------------------------------------------------------------------------

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        if region_of(spec.location) is None:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"{spec.location!r} is neither a GKE region nor a GKE zone", "/location"
            )
        project = self._project(account)
        parent = f"projects/{project}/locations/{spec.location}"
        path = f"{parent}/clusters/{spec.name}"
        zones = self._node_zones(account, spec.location)
        what = f"creating GKE cluster {spec.location}/{spec.name}"

        def ensure(api: container_v1.ClusterManagerClient) -> container_v1.Cluster:
            found = self._read_cluster(api, path)
            if found is None:
                try:
                    op = api.create_cluster(
                        request={"parent": parent, "cluster": shapes.cluster_message(spec, zones)},
                        retry=None,
                        timeout=CALL_TIMEOUT_SECONDS,
                    )
                    self._check_operation(api, path, op, what)
                except gexc.Conflict:
                    pass  # an earlier call made it: read it below
                found = self._read_cluster(api, path)
                if found is None:
                    raise ComputeError(ErrorCode.UNAVAILABLE, f"{what}: the new cluster cannot be read yet")
            return found

        cluster = await self._call(what, ensure)
        state = shapes.cluster_state(cluster)
        if state.private_nodes != spec.private_nodes:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"GKE cluster {state.cluster_id} has private_nodes={state.private_nodes}; a cluster's mode never "
                "changes in place: make a new cluster",
            )
        return state

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        path = self._cluster_path(account, cluster_id)
        cluster = await self._call(f"reading GKE cluster {cluster_id}", lambda api: self._read_cluster(api, path))
        return None if cluster is None else shapes.cluster_state(cluster)

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        return await self.get_cluster(account, f"{location}/{name}")  # the id is the location and the name

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        parent = f"projects/{self._project(account)}/locations/-"  # every location, as projects.locations.clusters.list

        def listed(api: container_v1.ClusterManagerClient) -> tuple[ClusterState, ...]:
            answer = api.list_clusters(request={"parent": parent}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
            return tuple(shapes.cluster_state(cluster) for cluster in answer.clusters)

        return await self._call("listing GKE clusters", listed)

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        path = self._cluster_path(account, cluster_id)
        what = f"deleting GKE cluster {cluster_id}"

        def delete(api: container_v1.ClusterManagerClient) -> None:
            found = self._read_cluster(api, path)
            if found is None or found.status == container_v1.Cluster.Status.STOPPING:
                return
            try:
                op = api.delete_cluster(request={"name": path}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
            except gexc.NotFound:
                return
            self._check_operation(api, path, op, what)

        await self._call(what, delete)

    async def upgrade_cluster(self, account: ProviderAccount, cluster_id: str, version: str) -> ClusterState:
        path = self._cluster_path(account, cluster_id)
        what = f"upgrading GKE cluster {cluster_id} to {version}"

        def upgrade(api: container_v1.ClusterManagerClient) -> container_v1.Cluster:
            op = api.update_master(
                request={"name": path, "master_version": version}, retry=None, timeout=CALL_TIMEOUT_SECONDS
            )
            self._check_operation(api, path, op, what)
            found = self._read_cluster(api, path)
            if found is None:
                raise ComputeError(ErrorCode.NOT_FOUND, f"{what}: the cluster is gone")
            return found

        return shapes.cluster_state(await self._call(what, upgrade))

    async def upgrade_versions(self, account: ProviderAccount, cluster_id: str) -> tuple[str, ...]:
        """The server config's valid master versions newer than the cluster's (GKE lists newest first)."""
        path = self._cluster_path(account, cluster_id)
        location = path.split("/")[3]
        what = f"reading the GKE versions offered to {cluster_id}"

        def offered(api: container_v1.ClusterManagerClient) -> tuple[str, ...]:
            cluster = self._read_cluster(api, path)
            if cluster is None:
                raise ComputeError(ErrorCode.NOT_FOUND, f"{what}: the cluster is gone")
            config = api.get_server_config(
                request={"name": f"projects/{self._project(account)}/locations/{location}"},
                retry=None,
                timeout=CALL_TIMEOUT_SECONDS,
            )
            valid = list(config.valid_master_versions)
            current = cluster.current_master_version
            newer = valid[: valid.index(current)] if current in valid else valid
            return tuple(newer)

        return await self._call(what, offered)

    # -- node pools --------------------------------------------------------------------------

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        _check_size(spec.node_count, spec.autoscaling)
        cluster_path = self._cluster_path(account, cluster_id)
        path = f"{cluster_path}/nodePools/{spec.name}"
        what = f"creating node pool {spec.name} of GKE cluster {cluster_id}"

        def ensure(api: container_v1.ClusterManagerClient) -> NodePoolState:
            found = self._read_pool(api, path)
            if found is not None:
                changes = shapes.shape_changes(found, spec)
                if changes:
                    raise ComputeError(
                        ErrorCode.INVALID_STATE,
                        f"node pool {spec.name} of GKE cluster {cluster_id} would change shape "
                        f"({'; '.join(changes)}); a node pool never changes shape: make a new one",
                    )
                if found.status == container_v1.NodePool.Status.ERROR:
                    failure = pool_error(
                        what,
                        found.status_message or "the node pool failed",
                        [c.code.name for c in found.conditions],
                    )
                    api.delete_node_pool(request={"name": path}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
                    raise failure
                return self._pool_state(found)
            try:
                op = api.create_node_pool(
                    request={"parent": cluster_path, "node_pool": shapes.node_pool_message(spec)},
                    retry=None,
                    timeout=CALL_TIMEOUT_SECONDS,
                )
                self._check_operation(api, path, op, what)
            except gexc.Conflict:
                pass  # an earlier call made it
            created = self._read_pool(api, path)
            if created is None:
                raise ComputeError(ErrorCode.UNAVAILABLE, f"{what}: the new node pool cannot be read yet")
            return self._pool_state(created)

        return await self._call(what, ensure)

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState | None:
        path = f"{self._cluster_path(account, cluster_id)}/nodePools/{name}"

        def read(api: container_v1.ClusterManagerClient) -> NodePoolState | None:
            pool = self._read_pool(api, path)
            return None if pool is None else self._pool_state(pool)

        return await self._call(f"reading node pool {name} of {cluster_id}", read)

    async def resize_node_pool(
        self,
        account: ProviderAccount,
        cluster_id: str,
        name: str,
        node_count: int,
        autoscaling: Autoscaling | None = None,
    ) -> NodePoolState:
        _check_size(node_count, autoscaling)
        path = f"{self._cluster_path(account, cluster_id)}/nodePools/{name}"
        what = f"resizing node pool {name} of GKE cluster {cluster_id} to {node_count} per zone"

        def resize(api: container_v1.ClusterManagerClient) -> NodePoolState:
            found = self._read_pool(api, path)
            if found is None:
                raise ComputeError(ErrorCode.NOT_FOUND, f"{what}: no such node pool")
            current = self._pool_state(found)
            if current.autoscaling != autoscaling:
                op = api.set_node_pool_autoscaling(
                    request={"name": path, "autoscaling": shapes.autoscaling_message(autoscaling)},
                    retry=None,
                    timeout=CALL_TIMEOUT_SECONDS,
                )
                self._check_operation(api, path, op, what)
            elif autoscaling is None and current.node_count != node_count:
                op = api.set_node_pool_size(
                    request={"name": path, "node_count": node_count}, retry=None, timeout=CALL_TIMEOUT_SECONDS
                )
                self._check_operation(api, path, op, what)
            else:
                return current
            return self._pool_state(self._read_pool(api, path) or found)

        return await self._call(what, resize)

    async def upgrade_node_pool(
        self, account: ProviderAccount, cluster_id: str, name: str, version: str
    ) -> NodePoolState:
        """nodePools.update with `nodeVersion`: GKE upgrades the pool's nodes (UPGRADE_NODES)."""
        path = f"{self._cluster_path(account, cluster_id)}/nodePools/{name}"
        what = f"upgrading node pool {name} of GKE cluster {cluster_id} to {version}"

        def upgrade(api: container_v1.ClusterManagerClient) -> NodePoolState:
            found = self._read_pool(api, path)
            if found is None:
                raise ComputeError(ErrorCode.NOT_FOUND, f"{what}: no such node pool")
            if found.status != container_v1.NodePool.Status.RUNNING or _same_version(found.version, version):
                return self._pool_state(found)
            op = api.update_node_pool(
                request={"name": path, "node_version": version, "image_type": found.config.image_type},
                retry=None,
                timeout=CALL_TIMEOUT_SECONDS,
            )
            self._check_operation(api, path, op, what)
            return self._pool_state(self._read_pool(api, path) or found)

        return await self._call(what, upgrade)

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        path = f"{self._cluster_path(account, cluster_id)}/nodePools/{name}"
        what = f"deleting node pool {name} of GKE cluster {cluster_id}"

        def delete(api: container_v1.ClusterManagerClient) -> None:
            found = self._read_pool(api, path)
            if found is None or found.status == container_v1.NodePool.Status.STOPPING:
                return
            try:
                op = api.delete_node_pool(request={"name": path}, retry=None, timeout=CALL_TIMEOUT_SECONDS)
            except gexc.NotFound:
                return
            self._check_operation(api, path, op, what)

        await self._call(what, delete)

    async def remove_machines(
        self,
        account: ProviderAccount,
        cluster_id: str,
        pool_name: str,
        provider_ids: tuple[str, ...],
        *,
        replace: bool,
    ) -> None:
        """Through each zone's managed instance group of the pool (Compute Engine): recreateInstances
        (the same VM name, a fresh VM from the group's template, the count stays) or deleteInstances
        (lowers `targetSize` by as many, skipping VMs already gone or going)."""
        if not provider_ids:
            return
        path = f"{self._cluster_path(account, cluster_id)}/nodePools/{pool_name}"
        verb = "recreating" if replace else "deleting"
        what = f"{verb} {len(provider_ids)} machine(s) of node pool {pool_name} of GKE cluster {cluster_id}"
        wanted: dict[str, list[str]] = {}
        for provider_id in provider_ids:
            try:
                _, zone, instance = shapes.gce_instance(provider_id)
            except ValueError as exc:
                raise ComputeError(ErrorCode.INVALID_INPUT, f"{what}: {exc}") from exc
            wanted.setdefault(zone, []).append(f"zones/{zone}/instances/{instance}")

        def remove(api: container_v1.ClusterManagerClient) -> None:
            pool = self._read_pool(api, path)
            if pool is None:
                raise ComputeError(ErrorCode.NOT_FOUND, f"{what}: no such node pool")
            self._groups.remove(pool.instance_group_urls, wanted, replace=replace, what=what)

        await self._call(what, remove)

    # -- access ------------------------------------------------------------------------------

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        """A Google access token for the cluster endpoint, used 600 s at most.

        With the account's `serviceAccount`, a token of that service account from the IAM
        Credentials API (`generateAccessToken`, `lifetime: 600s`), which Google itself stops
        accepting after 600 s. Without one, the caller's own access token, which Google accepts
        for an hour: it is used for one run only, and never past 600 s (docs/credentials.md)."""
        state = await self.get_cluster(account, cluster_id)
        if state is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"GKE cluster {cluster_id} does not exist")
        if state.outputs is None:
            raise ComputeError(ErrorCode.INVALID_STATE, f"GKE cluster {cluster_id} is {state.status}, not ready")
        outputs = state.outputs
        service_account = account.config.get("serviceAccount")
        now = self._clock.now().astimezone(UTC)

        def mint() -> tuple[str, datetime | None]:
            with google_errors(f"minting a Google access token for {cluster_id}"):
                credentials = self._google_credentials()
                if isinstance(service_account, str) and service_account:
                    credentials = self._short_lived(credentials, service_account)
                with self._lock:
                    if self._auth_session is None:
                        self._auth_session = requests.Session()
                    session = self._auth_session
                credentials.refresh(Request(session=session))  # type: ignore[no-untyped-call]
                token = credentials.token
                expiry = credentials.expiry if service_account else None
            if not token:
                raise ComputeError(ErrorCode.PERMISSION_DENIED, f"Google minted no access token for {cluster_id}")
            return str(token), expiry

        token, expiry = await asyncio.get_running_loop().run_in_executor(self._pool, mint)
        redact_value(token)
        expires_at = now + timedelta(seconds=CREDENTIAL_TTL_SECONDS)
        if expiry is not None:  # the provider's own expiry (naive UTC), never later than 600 s
            expires_at = min(expires_at, expiry.replace(tzinfo=UTC))
        return ClusterCredentials(
            endpoint=outputs.endpoint, ca_data=outputs.ca_data, token=token, expires_at=expires_at
        )

    def _short_lived(
        self, source: google.auth.credentials.Credentials, service_account: str
    ) -> google.auth.credentials.Credentials:
        """The service account's token through IAM Credentials generateAccessToken, lifetime 600 s."""
        override = None
        if self._endpoint:
            override = f"{self._endpoint}/v1/projects/-/serviceAccounts/{service_account}:generateAccessToken"
        return impersonated_credentials.Credentials(  # type: ignore[no-untyped-call]
            source_credentials=source,
            target_principal=service_account,
            target_scopes=[SCOPE],
            lifetime=int(CREDENTIAL_TTL_SECONDS),
            iam_endpoint_override=override,
        )

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        location, name = shapes.split_cluster_id(adopt_id)
        if region_of(location) is None or not name:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"a GKE adopt id is <location>/<cluster name>, not {adopt_id!r}"
            )
        state = await self.get_cluster(account, adopt_id)
        if state is None:
            raise ComputeError(
                ErrorCode.NOT_FOUND, f"GKE cluster {adopt_id} does not exist in project {self._project(account)}"
            )
        if state.status != ClusterStatus.READY or state.outputs is None:
            raise ComputeError(
                ErrorCode.INVALID_STATE, f"GKE cluster {adopt_id} is {state.status}; adopt a running one"
            )
        return state

    # -- vocabulary --------------------------------------------------------------------------

    async def machine_gpus(self, account: ProviderAccount, machine_type: str) -> GpuInfo | None:
        built_in = MACHINE_GPUS.get(machine_type)
        if built_in is None:
            return None
        accelerator, count = built_in
        return GpuInfo(model=GPU_MODELS[accelerator], count=count, accelerator_type=accelerator)

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        """The GPU quotas of the cluster's region that the needs' GPUs count against (quota.py)."""
        wanted = gpu_needs(needs)
        if not wanted:
            return ()
        project = self._project(account)
        location, _ = shapes.split_cluster_id(place)
        region = region_of(location) or location
        listed = await self._call(
            f"read region {region} of project {project}", lambda _api: self._regions.read(project, region)
        )
        return region_quotas(wanted, listed, region)

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        """The flavor's zones, else the account's zones (the cluster's node zones), else a regional default of 3."""
        if zones:
            return len(zones)
        account_zones = [z for z in account.config.get("zones") or () if isinstance(z, str)]
        return len(account_zones) or REGIONAL_DEFAULT_NODE_ZONES

    async def validate_substrate(
        self, account: ProviderAccount, substrate: Mapping[str, Any], *, path: str
    ) -> list[Problem]:
        return validate_substrate(account.config, substrate, path)


def _check_size(node_count: int, autoscaling: Autoscaling | None) -> None:
    if node_count < 0:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"a node pool has 0 or more nodes per zone, not {node_count}")
    if autoscaling is not None and not 0 <= autoscaling.min_nodes <= autoscaling.max_nodes:
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"autoscaling needs 0 <= minNodes <= maxNodes, not {autoscaling.min_nodes}..{autoscaling.max_nodes}",
        )


def _same_version(actual: str, wanted: str) -> bool:
    return bool(actual) and version_matches(actual, wanted)
