"""`DoksEmulator`: DigitalOcean Kubernetes (API v2) on a loopback port, on the simulated clock.

    async with DoksEmulator(clock, kube) as doks:
        doks.add_token(token)                        # a valid API token of one account (team)
        provider = digitalocean_provider(endpoint=doks.url)
        ...
        doks.issued                                  # every cluster credential token it minted
        doks.faults.stockout("gpu-h100x8-640gb")

Every cluster is backed by a `KubeCluster` of the Kubernetes API emulator: its
endpoint is the cluster's `endpoint`, minted credentials are bearer tokens that
cluster accepts until they expire, and node pools materialise Nodes named
`<node pool>-<suffix>` once their simulated provisioning time has passed.
"""

from __future__ import annotations

import asyncio
import secrets
import string
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from better_compute.core.clock import Clock
from better_compute.testing.doks.app import build_app
from better_compute.testing.doks.catalog import SIZES, VERSIONS, kubernetes_version, resolve_version
from better_compute.testing.doks.faults import DoksFaults
from better_compute.testing.doks.gpu_nodes import gpu_node, sync_gpu_plugin
from better_compute.testing.doks.model import GOING, Cluster, Node, NodePool
from better_compute.testing.doks.ratelimit import RateLimiter
from better_compute.testing.lifecycle import StartStop
from better_compute.testing.loopback import LoopbackServer

if TYPE_CHECKING:
    from better_compute.testing.kube import KubeApiServer

__all__ = ["DoksEmulator", "Timings"]


@dataclass
class Timings:
    """Simulated durations, in seconds (roughly what DOKS takes); a test may change them."""

    cluster_provisioning: float = 360.0
    node_provisioning: float = 180.0
    node_deletion: float = 60.0
    node_drain: float = 30.0
    """How long DOKS drains a node deleted without `skip_drain` before deleting its droplet."""
    pool_deletion: float = 90.0
    cluster_deletion: float = 120.0
    upgrade: float = 600.0


NODE_POOL_LABEL = "doks.digitalocean.com/node-pool"
NODE_POOL_ID_LABEL = "doks.digitalocean.com/node-pool-id"
NODE_ID_LABEL = "doks.digitalocean.com/node-id"


class DoksEmulator(StartStop):
    """The emulated account(s): tokens, clusters, node pools, faults and minted credentials.

    `url` is the API's base URL, `issued` every cluster token minted, `requests` every
    (method, path) let through, `clusters` the state by UUID, `timings` the simulated
    durations, `limiter` the rate limits and `faults` the injected faults.
    """

    def __init__(
        self,
        clock: Clock,
        kube: KubeApiServer,
        *,
        tokens: tuple[str, ...] = (),
        per_hour: int = 5000,
        per_minute: int = 250,
    ) -> None:
        self.clock = clock
        self.kube = kube
        self.timings = Timings()
        self.faults = DoksFaults(self)
        self.limiter = RateLimiter(per_hour=per_hour, per_minute=per_minute)
        self.issued: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.clusters: dict[str, Cluster] = {}
        self.droplets_elsewhere: dict[str, int] = {}
        """Droplets each team runs outside its clusters (testing/doks/account.py), by team."""
        self.versions: tuple[str, ...] = VERSIONS
        """The version slugs DigitalOcean offers now, oldest first ("latest" is the last). A test may hold
        the newest back and offer it later, as DigitalOcean releasing a version."""
        self._teams: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wakes: dict[datetime, asyncio.Task[None]] = {}
        self._settling = asyncio.Lock()
        for token in tokens:
            self.add_token(token)
        self._server = LoopbackServer(build_app(self), name="doks")
        self.url = self._server.url

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.stop()

    # -- accounts --------------------------------------------------------------------------

    def add_token(self, token: str, *, team: str = "team-default") -> None:
        """Accept `token` as an API token of `team`; teams see only their own clusters."""
        self._teams[token] = team

    def team_of(self, token: str) -> str | None:
        return self._teams.get(token)

    def run_droplets(self, count: int, *, team: str = "team-default") -> None:
        """`count` more Droplets of `team` that are no cluster's nodes: they count against its droplet limit."""
        self.droplets_elsewhere[team] = self.droplets_elsewhere.get(team, 0) + count

    # -- time ------------------------------------------------------------------------------

    def wake_in(self, seconds: float) -> None:
        """Settle again once `seconds` of simulated time have passed.

        Wakes due at one instant share one settle: a fleet's pools made in one step would
        otherwise each walk every cluster at the same moment (quadratic in the fleet).
        """
        when = self.clock.now() + timedelta(seconds=seconds)
        if when in self._wakes:
            return
        task = asyncio.get_running_loop().create_task(self._wake(when), name="doks:wake")
        self._wakes[when] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _wake(self, when: datetime) -> None:
        try:
            await self.clock.sleep((when - self.clock.now()).total_seconds())
        finally:
            self._wakes.pop(when, None)
        await self.settle()

    async def settle(self) -> None:
        """Apply every transition that is due at the clock's now."""
        async with self._settling:
            now = self.clock.now()
            for cluster in list(self.clusters.values()):
                await self._settle_cluster(cluster, now)

    async def _settle_cluster(self, cluster: Cluster, now: datetime) -> None:
        if cluster.state == "provisioning" and cluster.ready_at is not None and cluster.ready_at <= now:
            cluster.state, cluster.serving, cluster.message = "running", True, ""
        if cluster.state == "upgrading" and cluster.upgrade_at is not None and cluster.upgrade_at <= now:
            cluster.version = cluster.upgrade_to or cluster.version
            cluster.state, cluster.upgrade_to, cluster.upgrade_at = "running", None, None
            _set_kube_version(cluster)
            # DOKS upgrades the node pools with the control plane, one node after another; the emulator
            # upgrades each in place (its kubelet at the new version, the same Node name).
            for pool in cluster.pools:
                for node in pool.nodes:
                    if node.materialised:
                        await cluster.kube.kubelet.upgrade_node(node.name, kubernetes_version(cluster.version))
        if cluster.state == "deleting" and cluster.gone_at is not None and cluster.gone_at <= now:
            del self.clusters[cluster.id]
            self.kube.remove_cluster(cluster.id)
            return
        for pool in list(cluster.pools):
            for node in list(pool.nodes):
                if node.state in GOING and node.gone_at is not None and node.gone_at <= now:
                    pool.nodes.remove(node)
                    if node.materialised:
                        await cluster.kube.kubelet.remove_node(node.name)
                elif node.state == "provisioning" and node.ready_at <= now and cluster.serving:
                    node.state, node.updated_at = "running", now
                    await self._materialise(cluster, pool, node)
            if pool.gone_at is not None and pool.gone_at <= now and not pool.nodes:
                cluster.pools.remove(pool)

    async def _materialise(self, cluster: Cluster, pool: NodePool, node: Node) -> None:
        size = SIZES[pool.size]
        labels = {
            **pool.labels,
            NODE_POOL_LABEL: pool.name,
            NODE_POOL_ID_LABEL: pool.id,
            NODE_ID_LABEL: node.id,
            "node.kubernetes.io/instance-type": pool.size,
            "topology.kubernetes.io/region": cluster.region,
            "kubernetes.io/hostname": node.name,
        }
        capacity = {"cpu": str(size.vcpus), "memory": f"{size.memory_mib}Mi", "pods": "110"}
        if size.gpu_vendor == "amd":
            capacity["amd.com/gpu"] = str(size.gpus)
        taints = [{"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]} for t in pool.taints]
        gpus = gpu_node(size, labels, taints)
        await cluster.kube.kubelet.add_node(
            node.name,
            labels=labels,
            capacity=capacity,
            taints=taints,
            ready=True,
            provider_id=f"digitalocean://{node.droplet_id}",
            version=kubernetes_version(cluster.version),
            gpus=gpus,
        )
        node.materialised = True

    # -- building blocks the API and the tests share ------------------------------------------

    def new_cluster(
        self, *, team: str, name: str, region: str, version: str, isolated_workers: bool = False
    ) -> Cluster:
        now = self.clock.now()
        cluster_id = str(uuid.uuid4())
        kube = self.kube.add_cluster(cluster_id, version=kubernetes_version(version))
        hung = self.faults.hang_new_clusters
        cluster = Cluster(
            id=cluster_id,
            team=team,
            name=name,
            region=region,
            version=version,
            created_at=now,
            ready_at=None if hung else now + timedelta(seconds=self.timings.cluster_provisioning),
            kube=kube,
            isolated_workers=isolated_workers,
            vpc_uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"vpc:{team}:{region}")),
        )
        if hung:
            kube.unresponsive = True
        else:
            self.wake_in(self.timings.cluster_provisioning)
        self.clusters[cluster_id] = cluster
        return cluster

    def hang(self, cluster_id: str) -> None:
        cluster = self.clusters[cluster_id]
        cluster.ready_at = None
        cluster.kube.unresponsive = True
        if cluster.state == "running":
            cluster.state, cluster.message = "degraded", "the control plane is not responding"

    def add_nodes(self, pool: NodePool, count: int, *, after: float | None = None) -> None:
        now = self.clock.now()
        delay = self.timings.node_provisioning if after is None else after
        for _ in range(count):
            suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
            pool.nodes.append(
                Node(
                    id=str(uuid.uuid4()),
                    name=f"{pool.name}-{suffix}",
                    droplet_id=str(100_000_000 + secrets.randbelow(900_000_000)),
                    created_at=now,
                    ready_at=now + timedelta(seconds=delay),
                )
            )
        if count:
            self.wake_in(delay)

    def remove_nodes(self, pool: NodePool, count: int) -> None:
        """Take `count` live nodes out, newest first."""
        now = self.clock.now()
        live = [n for n in pool.nodes if n.state not in GOING]
        for node in reversed(live[len(live) - count :] if count else []):
            node.state, node.updated_at = "deleting", now
            node.gone_at = now + timedelta(seconds=self.timings.node_deletion)
        if count:
            self.wake_in(self.timings.node_deletion)

    def delete_node(self, pool: NodePool, node: Node, *, replace: bool, skip_drain: bool) -> None:
        """One named node goes: drained first (`node_drain`) unless `skip_drain`, then its droplet is deleted
        (`node_deletion`). With `replace` a new node (a new droplet, a new name) is made in its place;
        without it the pool's count is one lower."""
        now = self.clock.now()
        delay = self.timings.node_deletion + (0 if skip_drain else self.timings.node_drain)
        node.state, node.updated_at = ("deleting" if skip_drain else "draining"), now
        node.gone_at = now + timedelta(seconds=delay)
        self.wake_in(delay)
        if replace:
            self.add_nodes(pool, 1)
        else:
            pool.count -= 1

    async def autoscale(self, cluster_id: str, pool_name: str, count: int) -> int:
        """Play DOKS's cluster autoscaler: an autoscaled pool's count moves to `count` within its bounds,
        and nodes are added or removed to match. Returns the new count."""
        await self.settle()
        pool = next(p for p in self.clusters[cluster_id].pools if p.name == pool_name)
        if not pool.auto_scale:
            raise ValueError(f"node pool {pool_name} is not autoscaled")
        before, pool.count = pool.count, min(max(count, pool.min_nodes), pool.max_nodes)
        self.add_nodes(pool, max(pool.count - before, 0))
        self.remove_nodes(pool, max(before - pool.count, 0))
        return pool.count

    async def reclaim_spot(self, cluster_id: str, node_name: str | None) -> str:
        await self.settle()
        cluster = self.clusters[cluster_id]
        for pool in cluster.pools:
            for node in pool.nodes:
                if pool.spot and node.state == "running" and node_name in (None, node.name):
                    pool.nodes.remove(node)
                    if node.materialised:
                        await cluster.kube.kubelet.remove_node(node.name)
                    self.add_nodes(pool, 1)
                    return node.name
        raise KeyError(f"no running Spot node {node_name or ''} in cluster {cluster_id}")

    async def seed_cluster(
        self,
        *,
        name: str,
        region: str = "tor1",
        version: str | None = None,
        node_pools: tuple[dict[str, Any], ...] = ({"name": "default", "size": "s-2vcpu-4gb", "count": 1},),
        nvidia_gpu_device_plugin: bool | None = None,
        amd_gpu_device_plugin: bool | None = None,
        team: str = "team-default",
    ) -> str:
        """A running cluster the user made themselves (to adopt), with running nodes; returns its UUID.

        The device plugins default as DigitalOcean's do: on when a pool has GPUs of that vendor.
        """
        slug = resolve_version(version, self.versions) or self.versions[-1]
        cluster = self.new_cluster(team=team, name=name, region=region, version=slug)
        cluster.ready_at = self.clock.now()
        for spec in node_pools:
            pool = NodePool(
                id=str(uuid.uuid4()),
                name=spec["name"],
                size=spec["size"],
                count=spec["count"],
                labels=dict(spec.get("labels", {})),
            )
            cluster.pools.append(pool)
            self.add_nodes(pool, pool.count, after=0)
        cluster.nvidia_gpu_device_plugin = cluster.plugin_default("nvidia", nvidia_gpu_device_plugin)
        cluster.amd_gpu_device_plugin = cluster.plugin_default("amd", amd_gpu_device_plugin)
        sync_gpu_plugin(cluster.kube, cluster.nvidia_gpu_device_plugin)
        await self.settle()
        return cluster.id


def _set_kube_version(cluster: Cluster) -> None:
    cluster.kube.version = kubernetes_version(cluster.version)
