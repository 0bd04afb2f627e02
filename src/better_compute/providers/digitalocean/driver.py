"""`DoksKubernetes`: the `ProviderKubernetes` of DigitalOcean Kubernetes, on pydo.

Clusters are found by name (DOKS names are unique per account), so a retried
`ensure_cluster` finds what the first call made. A cluster better-compute creates
gets DigitalOcean's own GPU device plugins switched off (bcd's device plugin hands
out the GPUs) and a one-node `bc-system` pool, since DOKS makes no cluster
without a node. Node pools are addressed by name; they never change size (shape),
only their count and autoscaling.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.provider import (
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
)
from better_compute.providers.digitalocean.client import DoApi
from better_compute.providers.digitalocean.errors import translating
from better_compute.providers.digitalocean.shapes import (
    cluster_state,
    cluster_tags,
    node_pool_body,
    node_pool_state,
    plugins_on,
    sizing_body,
)
from better_compute.providers.digitalocean.validate import spot_allowed, substrate_problems
from better_compute.providers.digitalocean.vocabulary import (
    CREDENTIAL_EXPIRY_SECONDS,
    DEVICE_PLUGIN_ON,
    REGIONS,
    SYSTEM_POOL,
    VOCABULARY,
    gpu_info,
    is_gpu_size,
)
from better_compute.secrets import is_reference
from better_compute.vps.provider import ProviderAccount

__all__ = ["DoksKubernetes"]

T = TypeVar("T")
PAGE_SIZE = 200
"""Clusters per page when looking one up by name."""
PROVIDER_ID_PREFIX = "digitalocean://"
"""A DOKS Node's `spec.providerID` is this and its droplet's id (DigitalOcean's cloud controller manager)."""
_ADOPTABLE = frozenset({ClusterStatus.READY, ClusterStatus.UPDATING, ClusterStatus.PROVISIONING})


def _check_sizing(node_count: int, autoscaling: Autoscaling | None) -> None:
    if node_count == 0 and (autoscaling is None or autoscaling.min_nodes != 0):
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            "a fixed-size DOKS node pool has at least one node; 0 nodes needs autoscaling with minNodes 0",
            path="/nodeCount",
        )


def _check_shape(account: ProviderAccount, spec: NodePoolSpec) -> GpuInfo | None:
    """The spec's refusals that need no call; the size's GPUs."""
    if spec.zones:
        raise ComputeError(ErrorCode.INVALID_INPUT, "DOKS node pools have no zones: they are regional", path="/zones")
    if spec.disk_gib is not None:
        raise ComputeError(ErrorCode.INVALID_INPUT, "DOKS node pools take their size's disk", path="/diskGiB")
    _check_sizing(spec.node_count, spec.autoscaling)
    if spec.spot and not spot_allowed(account.config):
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            "Spot on DOKS is a DigitalOcean preview: the account needs allowSpot: true and previews",
            path="/spot",
        )
    info = gpu_info(spec.machine_type)
    if info is None and is_gpu_size(spec.machine_type):
        raise ComputeError(ErrorCode.INVALID_INPUT, f"{spec.machine_type} is not a DOKS GPU size", path="/machineType")
    if spec.accelerators is not None and (
        info is None or (spec.accelerators.type, spec.accelerators.count) != (info.accelerator_type, info.count)
    ):
        carries = f"{info.count} x {info.accelerator_type}" if info else "no GPUs"
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"{spec.machine_type} carries {carries}, not {spec.accelerators.count} x {spec.accelerators.type}",
            path="/accelerators",
        )
    return info


def _list_all(k: Any, kw: dict[str, Any]) -> list[dict[str, Any]]:
    clusters: list[dict[str, Any]] = []
    page = 1
    while True:
        _, body = k.list_clusters(per_page=PAGE_SIZE, page=page, **kw)
        clusters += body.get("kubernetes_clusters") or []
        if not ((body.get("links") or {}).get("pages") or {}).get("next"):
            return clusters
        page += 1


def _find_pool(k: Any, kw: dict[str, Any], cluster_id: str, name: str) -> tuple[bool, dict[str, Any] | None]:
    """(whether the cluster exists, the node pool called `name` or None)."""
    status, body = k.list_node_pools(cluster_id, **kw)
    if status == 404:
        return False, None
    return True, next((p for p in body.get("node_pools") or [] if p.get("name") == name), None)


class DoksKubernetes:
    """DOKS through pydo; every blocking call in the driver's own thread pool."""

    vocabulary = VOCABULARY

    def __init__(self, api: DoApi, clock: Clock) -> None:
        self._api = api
        self._clock = clock

    def close(self) -> None:
        """Stop the driver's thread pool."""
        self._api.close()

    async def _token(self, account: ProviderAccount) -> str:
        reference = account.config.get("token")
        if not is_reference(reference):
            raise ComputeError(
                ErrorCode.INVALID_INPUT,
                "the DigitalOcean API token must be a secret://<tenant>/<id> reference",
                path="/config/token",
            )
        token = await account.resolve_secret(str(reference))
        redact_value(token)
        return token

    async def _call(
        self,
        account: ProviderAccount,
        operation: Callable[[Any, dict[str, Any]], T],
        *,
        refused: ErrorCode = ErrorCode.INVALID_INPUT,
        group: str = "kubernetes",
    ) -> T:
        token = await self._token(account)
        with translating(self._clock, refused=refused):
            return await self._api.call(token, operation, group=group)

    # -- clusters ----------------------------------------------------------------------------

    async def _cluster_json(self, account: ProviderAccount, cluster_id: str) -> dict[str, Any] | None:
        def get(k: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
            status, body = k.get_cluster(cluster_id, **kw)
            return None if status == 404 else dict(body["kubernetes_cluster"])

        return await self._call(account, get)

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        if spec.location not in REGIONS:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"{spec.location!r} is not a DOKS region", path="/location")
        body: dict[str, Any] = {
            "name": spec.name,
            "region": spec.location,
            "version": spec.version or "latest",
            "isolated_workers": spec.private_nodes,
            "nvidia_gpu_device_plugin": {"enabled": False},
            "amd_gpu_device_plugin": {"enabled": False},
            "tags": cluster_tags(spec.labels),
            "node_pools": [{"name": SYSTEM_POOL[0], "size": SYSTEM_POOL[1], "count": SYSTEM_POOL[2]}],
        }

        def ensure(k: Any, kw: dict[str, Any]) -> dict[str, Any]:
            found = next((c for c in _list_all(k, kw) if c.get("name") == spec.name), None)
            if found is not None:
                return dict(found)
            _, made = k.create_cluster(body, **kw)
            return dict(made["kubernetes_cluster"])

        try:
            cluster = await self._call(account, ensure)
        except ComputeError as exc:
            if exc.code != ErrorCode.CONFLICT:
                raise
            cluster = await self._call(account, ensure)  # another caller made it between our list and create
        state = cluster_state(cluster)
        if state.private_nodes != spec.private_nodes:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"cluster {spec.name} has {'private' if state.private_nodes else 'public'} nodes; "
                "a cluster's mode never changes in place",
            )
        if cluster.get("region") != spec.location:
            raise ComputeError(
                ErrorCode.INVALID_STATE, f"cluster {spec.name} lives in {cluster.get('region')}, not {spec.location}"
            )
        return state

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        cluster = await self._cluster_json(account, cluster_id)
        return None if cluster is None else cluster_state(cluster)

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        def find(k: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
            found = (c for c in _list_all(k, kw) if c.get("name") == name and c.get("region") == location)
            return next(found, None)

        cluster = await self._call(account, find)  # the id is a UUID the provider chose: look the name up
        return None if cluster is None else cluster_state(cluster)

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        def listed(k: Any, kw: dict[str, Any]) -> tuple[ClusterState, ...]:
            return tuple(cluster_state(c) for c in _list_all(k, kw))

        return await self._call(account, listed)

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        def delete(k: Any, kw: dict[str, Any]) -> None:
            k.delete_cluster(cluster_id, **kw)  # 204, or 404 when it is already gone

        await self._call(account, delete, refused=ErrorCode.INVALID_STATE)

    async def upgrade_cluster(self, account: ProviderAccount, cluster_id: str, version: str) -> ClusterState:
        def upgrade(k: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
            status, body = k.get_cluster(cluster_id, **kw)
            if status == 404:
                return None
            cluster = body["kubernetes_cluster"]
            if _matches(cluster["version"], version) or (cluster.get("status") or {}).get("state") == "upgrading":
                return dict(cluster)
            _, offered = k.get_available_upgrades(cluster_id, **kw)
            slugs = [
                u["slug"]
                for u in (offered or {}).get("available_upgrade_versions") or []
                if _matches(u["slug"], version) or _matches(u.get("kubernetes_version", ""), version)
            ]
            if not slugs:
                raise ComputeError(
                    ErrorCode.INVALID_INPUT,
                    f"DOKS offers no upgrade of cluster {cluster_id} from {cluster['version']} to {version}",
                    path="/version",
                )
            k.upgrade_cluster(cluster_id, {"version": slugs[-1]}, **kw)
            _, body = k.get_cluster(cluster_id, **kw)
            return dict(body["kubernetes_cluster"])

        cluster = await self._call(account, upgrade)
        if cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no DOKS cluster {cluster_id}")
        return cluster_state(cluster)

    async def upgrade_versions(self, account: ProviderAccount, cluster_id: str) -> tuple[str, ...]:
        """`GET /v2/kubernetes/clusters/{id}/upgrades`: the version slugs DigitalOcean offers this cluster."""

        def offered(k: Any, kw: dict[str, Any]) -> tuple[str, ...] | None:
            status, body = k.get_available_upgrades(cluster_id, **kw)
            if status == 404:
                return None
            return tuple(str(u["slug"]) for u in (body or {}).get("available_upgrade_versions") or [])

        found = await self._call(account, offered)
        if found is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no DOKS cluster {cluster_id}")
        return found

    # -- node pools --------------------------------------------------------------------------

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        info = _check_shape(account, spec)

        def ensure(k: Any, kw: dict[str, Any]) -> dict[str, Any]:
            status, body = k.get_cluster(cluster_id, **kw)
            if status == 404:
                raise ComputeError(ErrorCode.NOT_FOUND, f"no DOKS cluster {cluster_id}")
            cluster = body["kubernetes_cluster"]
            existing = next((p for p in cluster.get("node_pools") or [] if p.get("name") == spec.name), None)
            if existing is not None:
                return dict(existing)
            plugins = plugins_on(cluster)
            if info is not None and plugins:
                raise ComputeError(
                    ErrorCode.INVALID_STATE,
                    f"DigitalOcean's own GPU device plugins are on for cluster {cluster_id} ({', '.join(plugins)}); "
                    "turn them off before better-compute adds GPU node pools",
                    reason=DEVICE_PLUGIN_ON,
                )
            _, made = k.add_node_pool(cluster_id, node_pool_body(spec), **kw)
            return dict(made["node_pool"])

        try:
            pool = await self._call(account, ensure)
        except ComputeError as exc:
            if exc.code != ErrorCode.CONFLICT:
                raise
            pool = await self._call(account, ensure)  # made by another caller between our read and create
        state = node_pool_state(pool)
        if state.machine_type != spec.machine_type or state.spot != spec.spot:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"node pool {spec.name} is {state.machine_type}{' (Spot)' if state.spot else ''}; "
                f"a node pool never changes shape: make a new one for {spec.machine_type}",
            )
        return state

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState | None:
        def get(k: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
            return _find_pool(k, kw, cluster_id, name)[1]

        pool = await self._call(account, get)
        return None if pool is None else node_pool_state(pool)

    async def upgrade_node_pool(
        self, account: ProviderAccount, cluster_id: str, name: str, version: str
    ) -> NodePoolState:
        """DOKS has no node-pool upgrade: `POST .../upgrade` upgrades the control plane and every node pool
        together (see the vocabulary). This reads the pool, at the cluster's version."""

        def read(k: Any, kw: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
            status, body = k.get_cluster(cluster_id, **kw)
            if status == 404:
                return None
            cluster = body["kubernetes_cluster"]
            pool = next((p for p in cluster.get("node_pools") or [] if p.get("name") == name), None)
            return None if pool is None else (dict(pool), str(cluster["version"]))

        found = await self._call(account, read)
        if found is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no node pool {name} in DOKS cluster {cluster_id}")
        return node_pool_state(found[0], version=found[1])

    async def resize_node_pool(
        self,
        account: ProviderAccount,
        cluster_id: str,
        name: str,
        node_count: int,
        autoscaling: Autoscaling | None = None,
    ) -> NodePoolState:
        if autoscaling is None:
            _check_sizing(node_count, None)

        def resize(k: Any, kw: dict[str, Any]) -> dict[str, Any]:
            exists, pool = _find_pool(k, kw, cluster_id, name)
            if pool is None:
                where = f"in cluster {cluster_id}" if exists else f"(no DOKS cluster {cluster_id})"
                raise ComputeError(ErrorCode.NOT_FOUND, f"no node pool {name} {where}")
            count = node_count
            if autoscaling is not None:  # the autoscaler's count, moved into the new bounds (PUT needs a count)
                count = min(max(int(pool.get("count") or 0), autoscaling.min_nodes), autoscaling.max_nodes)
            body = {
                "name": name,
                "labels": pool.get("labels") or {},
                "taints": pool.get("taints") or [],
                **sizing_body(count, autoscaling),
            }
            _, updated = k.update_node_pool(cluster_id, pool["id"], body, **kw)
            return dict(updated["node_pool"])

        return node_pool_state(await self._call(account, resize))

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        def delete(k: Any, kw: dict[str, Any]) -> None:
            _, pool = _find_pool(k, kw, cluster_id, name)
            if pool is not None:
                k.delete_node_pool(cluster_id, pool["id"], **kw)  # 204, or 404 when already gone

        await self._call(account, delete, refused=ErrorCode.INVALID_STATE)

    async def remove_machines(
        self,
        account: ProviderAccount,
        cluster_id: str,
        pool_name: str,
        provider_ids: tuple[str, ...],
        *,
        replace: bool,
    ) -> None:
        """`DELETE .../node_pools/{pid}/nodes/{node id}` per machine, `replace=1` or not (DOKS drains the node
        first). A DOKS Node's providerID is `digitalocean://<droplet id>`: the pool's nodes map droplet ids
        to node ids. A droplet no node of the pool holds any more, or whose node is already going, is skipped."""
        if not provider_ids:
            return
        droplets = []
        for provider_id in provider_ids:
            droplet = provider_id.removeprefix(PROVIDER_ID_PREFIX)
            if not provider_id.startswith(PROVIDER_ID_PREFIX) or not droplet.isdigit():
                raise ComputeError(
                    ErrorCode.INVALID_INPUT,
                    f"not a DOKS Node's providerID ({PROVIDER_ID_PREFIX}<droplet id>): {provider_id!r}",
                )
            droplets.append(droplet)

        def remove(k: Any, kw: dict[str, Any]) -> None:
            exists, pool = _find_pool(k, kw, cluster_id, pool_name)
            if pool is None:
                where = f"in cluster {cluster_id}" if exists else f"(no DOKS cluster {cluster_id})"
                raise ComputeError(ErrorCode.NOT_FOUND, f"no node pool {pool_name} {where}")
            live = {
                str(n.get("droplet_id")): str(n["id"])
                for n in pool.get("nodes") or []
                if (n.get("status") or {}).get("state") not in ("draining", "deleting")
            }
            for droplet in dict.fromkeys(droplets):
                if droplet in live:
                    k.delete_node(cluster_id, pool["id"], live[droplet], skip_drain=0, replace=int(replace), **kw)

        await self._call(account, remove, refused=ErrorCode.INVALID_STATE)

    # -- access ------------------------------------------------------------------------------

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        def mint(k: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
            status, body = k.get_credentials(cluster_id, expiry_seconds=CREDENTIAL_EXPIRY_SECONDS, **kw)
            return None if status == 404 else dict(body)

        body = await self._call(account, mint, refused=ErrorCode.INVALID_STATE)
        if body is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no DOKS cluster {cluster_id}")
        token = str(body["token"])
        redact_value(token)
        return ClusterCredentials(
            endpoint=str(body["server"]),
            ca_data=body.get("certificate_authority_data"),
            token=token,
            expires_at=datetime.fromisoformat(str(body["expires_at"]).replace("Z", "+00:00")),
        )

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        try:
            uuid.UUID(adopt_id)
        except ValueError as exc:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"{adopt_id!r} is not a DOKS cluster UUID", path="/cluster/adopt"
            ) from exc
        cluster = await self._cluster_json(account, adopt_id)
        if cluster is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no DOKS cluster {adopt_id} in this account")
        state = cluster_state(cluster)
        if state.status not in _ADOPTABLE:
            raise ComputeError(
                ErrorCode.INVALID_STATE, f"DOKS cluster {adopt_id} is {state.status}; it cannot be adopted"
            )
        plugins = plugins_on(cluster)
        if plugins:
            note = (
                f"DigitalOcean's own GPU device plugins are on ({', '.join(plugins)}): "
                f"GPU node pools will be refused ({DEVICE_PLUGIN_ON}) until they are off"
            )
            return replace(state, message=note)
        return state

    # -- vocabulary --------------------------------------------------------------------------

    async def machine_gpus(self, account: ProviderAccount, machine_type: str) -> GpuInfo | None:
        return gpu_info(machine_type)

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        """The account's droplet limit (`GET /v2/account`) against the droplets it runs (`GET /v2/droplets`'s
        `meta.total`): every DOKS node is a droplet, GPU or not."""
        if not needs:
            return ()

        def limit(k: Any, kw: dict[str, Any]) -> float:
            _, body = k.get(**kw)
            return float(body["account"]["droplet_limit"])

        def used(k: Any, kw: dict[str, Any]) -> float:
            _, body = k.list(per_page=1, **kw)
            return float(body["meta"]["total"])

        most = await self._call(account, limit, refused=ErrorCode.INVALID_STATE, group="account")
        running = await self._call(account, used, refused=ErrorCode.INVALID_STATE, group="droplets")
        adds = float(sum(n.count for n in needs))
        return (Quota("droplet_limit", "Droplet limit", "Droplets", most, running, adds),)

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        """DOKS node pools have no zones: `nodes` is the pool's total."""
        return 1

    async def validate_substrate(
        self,
        account: ProviderAccount,
        substrate: Mapping[str, Any],
        *,
        path: str,
    ) -> list[Problem]:
        problems = substrate_problems(account.config, substrate, path=path)
        adopt = (substrate.get("cluster") or {}).get("adopt")
        gpus = any(isinstance(f, Mapping) and f.get("gpus") for f in substrate.get("flavors") or ())
        if isinstance(adopt, str) and gpus and not problems:
            problems += await self._plugin_problems(account, adopt, f"{path}/cluster/adopt")
        return problems

    async def _plugin_problems(self, account: ProviderAccount, adopt_id: str, path: str) -> list[Problem]:
        """The plan says early what the substrate would: GPU flavors on a cluster whose own GPU
        device plugins are on. Anything else is the substrate's to report."""
        try:
            state = await self.read_adoptable(account, adopt_id)
        except ComputeError:
            return []
        if state.message and DEVICE_PLUGIN_ON in state.message:
            return [Problem(path, f"{DEVICE_PLUGIN_ON}: {state.message}")]
        return []


def _matches(actual: str, wanted: str) -> bool:
    """`1.32` and `1.32.2` both name `1.32.2-do.0`."""
    return actual == wanted or actual.startswith((wanted + ".", wanted + "-"))
