"""The Kubernetes endpoints of DigitalOcean API v2, on the emulator's state.

Each function takes the caller's team and the request's parts and returns
`(status, body)`; a refusal raises `ApiError`, which the app renders as DigitalOcean's
`{id, message, request_id}` envelope.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import yaml

from better_compute.testing.doks.account import account_json
from better_compute.testing.doks.catalog import (
    REGION_NAMES,
    REGIONS,
    SIZES,
    kubernetes_version,
    resolve_version,
    upgrades_from,
)
from better_compute.testing.doks.gpu_nodes import sync_gpu_plugin
from better_compute.testing.doks.model import GOING, Cluster, NodePool, iso

if TYPE_CHECKING:
    from better_compute.testing.doks.emulator import DoksEmulator

__all__ = ["ApiError", "Result"]

Result = tuple[int, dict[str, Any] | str | None]
"""(status, body): a dict answers JSON, a str answers YAML (the kubeconfig), None no body."""
ASSOCIATED_KINDS = ("load_balancers", "volumes", "volume_snapshots")
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NOT_FOUND = "The resource you were accessing could not be found."
SEVEN_DAYS = 7 * 24 * 3600
"""How long a credential lives when the request names no expiry_seconds."""


class ApiError(Exception):
    def __init__(self, status: int, error_id: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_id = error_id
        self.message = message


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "unprocessable_entity", message)


_TAG = re.compile(r"[A-Za-z0-9:_-]{1,255}")


def _checked_tags(tags: Any) -> list[str]:
    """DigitalOcean's tag names: letters, digits, ':', '-' and '_', at most 255 characters (docs/providers.md
    cites the page); a tag with '/' or '.' is refused, so better-compute writes its marks with '-'."""
    if tags is None:
        return []
    if not isinstance(tags, list):
        raise _unprocessable("tags must be a list of tag names")
    for tag in tags:
        if not (isinstance(tag, str) and _TAG.fullmatch(tag)):
            raise _unprocessable(f"tag {tag!r}: tags may contain letters, numbers, colons, dashes, and underscores")
    return list(tags)


def _cluster(emu: DoksEmulator, team: str, cluster_id: str) -> Cluster:
    cluster = emu.clusters.get(cluster_id)
    if cluster is None or cluster.team != team:
        raise ApiError(404, "not_found", NOT_FOUND)
    return cluster


def _pool(cluster: Cluster, pool_id: str) -> NodePool:
    pool = cluster.pool(pool_id)
    if pool is None:
        raise ApiError(404, "not_found", NOT_FOUND)
    return pool


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "the request body must be a JSON object")
    return body


# -- clusters ------------------------------------------------------------------------------


def list_clusters(emu: DoksEmulator, team: str, page: int, per_page: int) -> Result:
    mine = [c for c in emu.clusters.values() if c.team == team]
    start = (page - 1) * per_page
    chunk = mine[start : start + per_page]
    pages: dict[str, str] = {}
    if start + per_page < len(mine):
        pages["next"] = f"{emu.url}/v2/kubernetes/clusters?page={page + 1}&per_page={per_page}"
    return 200, {
        "kubernetes_clusters": [c.to_json() for c in chunk],
        "meta": {"total": len(mine)},
        "links": {"pages": pages},
    }


def create_cluster(emu: DoksEmulator, team: str, raw: Any) -> Result:
    body = _object(raw)
    name = body.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise _unprocessable("name must be 1-63 lower-case letters, digits or dashes")
    if any(c.name == name and c.team == team for c in emu.clusters.values()):
        raise _unprocessable(f"a cluster with the name {name} already exists")
    region = body.get("region")
    if region not in REGIONS:
        raise _unprocessable(f"region {region} is not a valid region")
    version = resolve_version(body.get("version"), emu.versions)
    if version is None:
        raise _unprocessable(f"version {body.get('version')} is not a supported Kubernetes version")
    specs = body.get("node_pools")
    if not isinstance(specs, list) or not specs:
        raise _unprocessable("a cluster needs at least one node pool")
    pools = [_new_pool(emu, team, spec, region, []) for spec in specs]
    if sum(p.count for p in pools) < 1:
        raise _unprocessable("a cluster needs at least one node pool with at least one node")
    _check_quota(emu, team, sum(p.count for p in pools))
    tags = _checked_tags(body.get("tags"))
    cluster = emu.new_cluster(
        team=team, name=name, region=region, version=version, isolated_workers=bool(body.get("isolated_workers"))
    )
    cluster.pools = pools
    cluster.tags = tags
    cluster.auto_upgrade = bool(body.get("auto_upgrade", False))
    cluster.surge_upgrade = bool(body.get("surge_upgrade", False))
    cluster.nvidia_gpu_device_plugin = cluster.plugin_default("nvidia", _enabled(body, "nvidia_gpu_device_plugin"))
    cluster.amd_gpu_device_plugin = cluster.plugin_default("amd", _enabled(body, "amd_gpu_device_plugin"))
    sync_gpu_plugin(cluster.kube, cluster.nvidia_gpu_device_plugin)
    for pool in pools:
        emu.add_nodes(pool, pool.count, after=emu.timings.cluster_provisioning + emu.timings.node_provisioning)
    return 201, {"kubernetes_cluster": cluster.to_json()}


def _enabled(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if isinstance(value, dict) and isinstance(value.get("enabled"), bool):
        return bool(value["enabled"])
    return None


def get_cluster(emu: DoksEmulator, team: str, cluster_id: str) -> Result:
    return 200, {"kubernetes_cluster": _cluster(emu, team, cluster_id).to_json()}


def update_cluster(emu: DoksEmulator, team: str, cluster_id: str, raw: Any) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    body = _object(raw)
    name = body.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise _unprocessable("name is required")
    cluster.name = name
    if isinstance(body.get("tags"), list):
        cluster.tags = _checked_tags(body["tags"])
    for key in ("auto_upgrade", "surge_upgrade"):
        if isinstance(body.get(key), bool):
            setattr(cluster, key, body[key])
    for key in ("nvidia_gpu_device_plugin", "amd_gpu_device_plugin"):
        enabled = _enabled(body, key)
        if enabled is not None:
            setattr(cluster, key, enabled)
    sync_gpu_plugin(cluster.kube, cluster.nvidia_gpu_device_plugin)
    cluster.updated_at = emu.clock.now()
    return 202, {"kubernetes_cluster": cluster.to_json()}


def delete_cluster(emu: DoksEmulator, team: str, cluster_id: str) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    _delete(emu, cluster)
    return 204, None


def associated_resources(emu: DoksEmulator, team: str, cluster_id: str) -> Result:
    """The load balancers, volumes and snapshots the cluster made: the emulator's clusters make none."""
    _cluster(emu, team, cluster_id)
    return 200, {kind: [] for kind in ASSOCIATED_KINDS}


def destroy_selective(emu: DoksEmulator, team: str, cluster_id: str, raw: Any) -> Result:
    """Delete the cluster and the named associated resources; every id named must be one of them."""
    cluster = _cluster(emu, team, cluster_id)
    body = _object(raw)
    for kind in ASSOCIATED_KINDS:
        ids = body.get(kind, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ApiError(400, "bad_request", f"{kind} must be an array of ids")
        if ids:
            raise ApiError(404, "not_found", f"{kind} {ids[0]} is not associated with cluster {cluster_id}")
    _delete(emu, cluster)
    return 204, None


def destroy_dangerous(emu: DoksEmulator, team: str, cluster_id: str) -> Result:
    """Delete the cluster and every associated resource (it has none to delete)."""
    _delete(emu, _cluster(emu, team, cluster_id))
    return 204, None


def kubeconfig(emu: DoksEmulator, team: str, cluster_id: str, expiry_seconds: int, kind: str | None) -> Result:
    """The admin kubeconfig in YAML, with a bearer token of `expiry_seconds` (7 days when 0), as doctl saves it."""
    if kind not in (None, "token", "sso"):
        raise ApiError(400, "bad_request", f"type must be token or sso, not {kind}")
    if kind == "sso":
        raise _unprocessable("SSO is not enabled for this cluster")
    cluster = _cluster(emu, team, cluster_id)
    access = _admin_access(emu, team, cluster, expiry_seconds)
    name = f"do-{cluster.region}-{cluster.name}"
    config = {
        "apiVersion": "v1",
        "clusters": [
            {
                "cluster": {
                    "certificate-authority-data": access["certificate_authority_data"],
                    "server": access["server"],
                },
                "name": name,
            }
        ],
        "contexts": [{"context": {"cluster": name, "user": f"{name}-admin"}, "name": name}],
        "current-context": name,
        "kind": "Config",
        "preferences": {},
        "users": [{"name": f"{name}-admin", "user": {"token": access["token"]}}],
    }
    return 200, yaml.safe_dump(config, sort_keys=False)


def options(emu: DoksEmulator, team: str) -> Result:
    """The regions, versions (newest first) and node sizes a cluster may be made with."""
    return 200, {
        "options": {
            "regions": [{"name": REGION_NAMES[slug], "slug": slug} for slug in REGIONS],
            "versions": [{"slug": v, "kubernetes_version": kubernetes_version(v)} for v in reversed(emu.versions)],
            "sizes": [{"name": slug, "slug": slug} for slug in SIZES],
        }
    }


def _delete(emu: DoksEmulator, cluster: Cluster) -> None:
    cluster_id = cluster.id
    refused = emu.faults.refused_delete(cluster_id)
    if refused is not None:
        raise ApiError(refused.status, refused.error_id, refused.message)
    if cluster.state != "deleting":
        now = emu.clock.now()
        cluster.state, cluster.message, cluster.updated_at = "deleting", "", now
        cluster.gone_at = now + timedelta(seconds=emu.timings.cluster_deletion)
        for pool in cluster.pools:
            emu.remove_nodes(pool, len([n for n in pool.nodes if n.state not in GOING]))
        emu.wake_in(emu.timings.cluster_deletion)


def upgrade_cluster(emu: DoksEmulator, team: str, cluster_id: str, raw: Any) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    body = _object(raw)
    available = upgrades_from(cluster.version, emu.versions)
    target = body.get("version")
    if target not in available:
        raise _unprocessable(f"{target} is not an available upgrade for version {cluster.version}")
    if cluster.state != "running":
        raise _unprocessable(f"the cluster is {cluster.state}; only a running cluster can be upgraded")
    cluster.state, cluster.upgrade_to = "upgrading", target
    cluster.upgrade_at = emu.clock.now() + timedelta(seconds=emu.timings.upgrade)
    emu.wake_in(emu.timings.upgrade)
    return 202, None


def available_upgrades(emu: DoksEmulator, team: str, cluster_id: str) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    versions = [
        {"slug": v, "kubernetes_version": kubernetes_version(v), "supported_features": []}
        for v in upgrades_from(cluster.version, emu.versions)
    ]
    return 200, {"available_upgrade_versions": versions or None}


def credentials(emu: DoksEmulator, team: str, cluster_id: str, expiry_seconds: int) -> Result:
    return 200, _admin_access(emu, team, _cluster(emu, team, cluster_id), expiry_seconds)


def _admin_access(emu: DoksEmulator, team: str, cluster: Cluster, expiry_seconds: int) -> dict[str, Any]:
    if not cluster.serving or cluster.state in ("deleting", "deleted"):
        raise _unprocessable(f"the cluster is {cluster.state}; credentials are available once it is running")
    ttl = expiry_seconds if expiry_seconds > 0 else SEVEN_DAYS
    token = cluster.kube.issue_token(f"doks:{team}:admin", ttl)
    emu.issued.append(token)
    return {
        "server": cluster.kube.endpoint,
        "certificate_authority_data": cluster.kube.ca_data,
        "client_certificate_data": None,
        "client_key_data": None,
        "token": token,
        "expires_at": iso(emu.clock.now() + timedelta(seconds=ttl)),
    }


# -- node pools ----------------------------------------------------------------------------


def _check_quota(emu: DoksEmulator, team: str, more: int) -> None:
    limit = account_json(emu, team)["account"]["droplet_limit"]
    if more <= 0:
        return
    running = sum(p.count for c in emu.clusters.values() if c.team == team for p in c.pools if p.gone_at is None)
    running += emu.droplets_elsewhere.get(team, 0)
    if running + more > limit:
        raise _unprocessable("creating this/these droplet(s) will exceed your droplet limit")


def _new_pool(emu: DoksEmulator, team: str, raw: Any, region: str, existing: list[NodePool]) -> NodePool:
    spec = _object(raw)
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise _unprocessable("node pool name must be 1-63 lower-case letters, digits or dashes")
    if any(p.name == name for p in existing):
        raise _unprocessable(f"a node pool with the name {name} already exists in this cluster")
    size = spec.get("size")
    if size not in SIZES:
        raise _unprocessable(f"size {size} is not a valid Droplet size")
    if size in emu.faults.stockouts:
        raise _unprocessable(f"size {size} is not available in {region}: insufficient capacity")
    pool = NodePool(id=str(uuid.uuid4()), name=name, size=size, count=0)
    _apply_sizing(pool, spec, creating=True)
    _apply_labels(pool, spec)
    pool.tags = [t for t in spec.get("tags") or [] if isinstance(t, str)]
    return pool


def _apply_sizing(pool: NodePool, spec: dict[str, Any], *, creating: bool) -> None:
    auto_scale = spec.get("auto_scale", pool.auto_scale if not creating else False)
    count = spec.get("count")
    if not isinstance(auto_scale, bool):
        raise _unprocessable("auto_scale must be a boolean")
    if auto_scale:
        low, high = spec.get("min_nodes", pool.min_nodes), spec.get("max_nodes", pool.max_nodes)
        if not isinstance(low, int) or not isinstance(high, int) or low < 0 or high < 1 or low > high:
            raise _unprocessable("min_nodes and max_nodes must satisfy 0 <= min_nodes <= max_nodes and max_nodes >= 1")
        count = low if count is None else count
        if not isinstance(count, int) or not low <= count <= high:
            raise _unprocessable("count must lie between min_nodes and max_nodes")
        pool.min_nodes, pool.max_nodes = low, high
    elif not isinstance(count, int) or count < 1:
        raise _unprocessable("a node pool without auto_scale needs a count of at least 1")
    pool.auto_scale, pool.count = auto_scale, count


def _apply_labels(pool: NodePool, spec: dict[str, Any]) -> None:
    labels = spec.get("labels")
    if labels is not None:
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise _unprocessable("labels must map strings to strings")
        pool.labels = dict(labels)
    taints = spec.get("taints")
    if taints is not None:
        if not isinstance(taints, list) or not all(
            isinstance(t, dict) and isinstance(t.get("key"), str) and t.get("effect") in EFFECTS for t in taints
        ):
            raise _unprocessable(f"each taint needs a key and an effect of {', '.join(EFFECTS)}")
        pool.taints = [{"key": t["key"], "value": str(t.get("value", "")), "effect": t["effect"]} for t in taints]


def list_pools(emu: DoksEmulator, team: str, cluster_id: str) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    return 200, {"node_pools": [p.to_json(cluster.id) for p in cluster.pools]}


def get_pool(emu: DoksEmulator, team: str, cluster_id: str, pool_id: str) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    return 200, {"node_pool": _pool(cluster, pool_id).to_json(cluster.id)}


def add_pool(emu: DoksEmulator, team: str, cluster_id: str, raw: Any) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    if cluster.state in ("deleting", "deleted"):
        raise _unprocessable(f"the cluster is {cluster.state}")
    pool = _new_pool(emu, team, raw, cluster.region, cluster.pools)
    _check_quota(emu, team, pool.count)
    cluster.pools.append(pool)
    emu.add_nodes(pool, pool.count)
    return 201, {"node_pool": pool.to_json(cluster.id)}


def update_pool(emu: DoksEmulator, team: str, cluster_id: str, pool_id: str, raw: Any) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    pool = _pool(cluster, pool_id)
    body = _object(raw)
    if not isinstance(body.get("name"), str) or "count" not in body:
        raise _unprocessable("name and count are required")
    if "size" in body and body["size"] != pool.size:
        raise _unprocessable("the size of a node pool cannot be changed; create a new node pool")
    if pool.gone_at is not None:
        raise _unprocessable("the node pool is being deleted")
    before = pool.count
    sizing = NodePool(pool.id, pool.name, pool.size, pool.count, auto_scale=pool.auto_scale)
    sizing.min_nodes, sizing.max_nodes = pool.min_nodes, pool.max_nodes
    _apply_sizing(sizing, body, creating=False)
    _check_quota(emu, team, sizing.count - before)
    _apply_labels(pool, body)
    pool.name = body["name"]
    pool.auto_scale, pool.min_nodes, pool.max_nodes, pool.count = (
        sizing.auto_scale,
        sizing.min_nodes,
        sizing.max_nodes,
        sizing.count,
    )
    if pool.count > before:
        emu.add_nodes(pool, pool.count - before)
    elif pool.count < before:
        emu.remove_nodes(pool, before - pool.count)
    return 202, {"node_pool": pool.to_json(cluster.id)}


def delete_pool(emu: DoksEmulator, team: str, cluster_id: str, pool_id: str) -> Result:
    cluster = _cluster(emu, team, cluster_id)
    pool = _pool(cluster, pool_id)
    if pool.gone_at is None:
        pool.gone_at = emu.clock.now() + timedelta(seconds=emu.timings.pool_deletion)
        emu.remove_nodes(pool, len([n for n in pool.nodes if n.state not in GOING]))
        emu.wake_in(emu.timings.pool_deletion)
    return 204, None


def delete_node(
    emu: DoksEmulator, team: str, cluster_id: str, pool_id: str, node_id: str, *, replace: bool, skip_drain: bool
) -> Result:
    """`DELETE .../node_pools/{pid}/nodes/{nid}`: 202, the node drained (unless `skip_drain=1`) and deleted;
    `replace=1` makes a new node in its place, otherwise the pool's count is one lower. A fixed-size pool
    keeps at least one node and an autoscaled one its `min_nodes`: going below is refused (422)."""
    cluster = _cluster(emu, team, cluster_id)
    pool = _pool(cluster, pool_id)
    node = next((n for n in pool.nodes if n.id == node_id), None)
    if node is None:
        raise ApiError(404, "not_found", NOT_FOUND)
    if node.state in GOING:
        raise _unprocessable("the node is already being deleted")
    if not replace:
        floor = pool.min_nodes if pool.auto_scale else 1
        if pool.count - 1 < floor:
            raise _unprocessable(
                f"deleting this node without replacement would take node pool {pool.name} below "
                f"{'its min_nodes' if pool.auto_scale else 'one node'} ({floor})"
            )
    emu.delete_node(pool, node, replace=replace, skip_drain=skip_drain)
    return 202, None
