"""The simulated AWS account state, and time moving through it.

Every slow provider step (a cluster coming up, nodes launching, an upgrade) is an
event due at a time of the injected clock. `settle()` runs every event that is due;
the API handlers call it before answering, so a response always reflects the
clock, and a background waker calls it when the clock reaches the next event, so
Nodes appear in the cluster's API server even when nobody asks EKS.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from better_compute.core.clock import Clock
from better_compute.testing.eks.catalog import INSTANCE_TYPES, KUBERNETES_VERSIONS, Timings
from better_compute.testing.eks.faults import EksFaults
from better_compute.testing.eks.gpu_nodes import gpu_node, start_host_plugin
from better_compute.testing.eks.model import Cluster, LaunchTemplate, Nodegroup

if TYPE_CHECKING:
    from better_compute.testing.kube import Attributes, KubeApiServer, TokenReview

__all__ = ["World"]

_log = logging.getLogger(__name__)

Action = Callable[[], Awaitable[None]]
Authenticator = Callable[[Cluster, str], "TokenReview | None"]
Authorizer = Callable[[Cluster, "TokenReview", "Attributes"], "str | None"]


def _taint_effect(effect: str) -> str:
    return {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}[effect]


class World:
    """Clusters, node groups and pending events of one emulator."""

    def __init__(
        self,
        clock: Clock,
        kube: KubeApiServer,
        timings: Timings,
        faults: EksFaults,
        authenticate: Authenticator,
        authorize: Authorizer,
    ) -> None:
        self.clock = clock
        self.kube = kube
        self.timings = timings
        self.faults = faults
        self.subnets: dict[str, str] = {}
        self.launch_templates: dict[str, LaunchTemplate] = {}  # EC2 CreateLaunchTemplate's, by id
        self.clusters: dict[tuple[str, str], Cluster] = {}
        self._authenticate = authenticate
        self._authorize = authorize
        self._events: list[tuple[datetime, int, Action]] = []
        self._seq = itertools.count()
        self._ips = itertools.count(10)
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._waker: asyncio.Task[None] | None = None

    # -- time ------------------------------------------------------------------------------

    def schedule(self, delay: float, action: Action) -> None:
        heapq.heappush(self._events, (self.clock.now() + timedelta(seconds=delay), next(self._seq), action))
        self._changed.set()

    async def settle(self) -> None:
        """Run every event that is due on the clock, in order."""
        async with self._lock:
            while self._events and self._events[0][0] <= self.clock.now():
                _, _, action = heapq.heappop(self._events)
                await action()

    def start(self) -> None:
        self._waker = asyncio.create_task(self._wake_loop(), name="eks-emulator:waker")

    async def stop(self) -> None:
        if self._waker is not None:
            self._waker.cancel()
            with suppress(asyncio.CancelledError):
                await self._waker
            self._waker = None

    async def _wake_loop(self) -> None:
        while True:
            self._changed.clear()
            try:
                await self.settle()
            except Exception:  # one broken step must not stop time for every other cluster
                _log.exception("an EKS emulator step failed")
            waits: list[asyncio.Task[object]] = [asyncio.create_task(self._changed.wait())]
            if self._events:
                delay = (self._events[0][0] - self.clock.now()).total_seconds()
                waits.append(asyncio.create_task(self.clock.sleep(delay)))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                # gather, not `suppress(CancelledError)` around each await: a stop() that lands
                # while a child is being reaped must end this loop, not be swallowed by it.
                for task in waits:
                    task.cancel()
                await asyncio.gather(*waits, return_exceptions=True)

    # -- clusters --------------------------------------------------------------------------

    def cluster(self, region: str, name: str) -> Cluster | None:
        return self.clusters.get((region, name))

    def add_cluster(self, cluster: Cluster, *, ready_in: float) -> None:
        self.clusters[(cluster.region, cluster.name)] = cluster
        self.schedule(ready_in, lambda: self._activate(cluster))

    async def _activate(self, cluster: Cluster) -> None:
        if self.clusters.get((cluster.region, cluster.name)) is not cluster or cluster.status != "CREATING":
            return
        if cluster.name in self.faults.silent_control_planes:
            return
        cluster.kube = self.kube.add_cluster(cluster.kube_id, KUBERNETES_VERSIONS[cluster.version])
        cluster.kube.add_authenticator(lambda token: self._authenticate(cluster, token))
        cluster.kube.add_authorizer(lambda user, attributes: self._authorize(cluster, user, attributes))
        cluster.status = "ACTIVE"

    def silence(self, name: str, silent: bool) -> None:
        """Make the API server of every cluster called `name` hang (or answer again)."""
        for cluster in self.clusters.values():
            if cluster.name == name and cluster.kube is not None:
                cluster.kube.unresponsive = silent

    def delete_cluster(self, cluster: Cluster) -> None:
        cluster.status = "DELETING"
        self.schedule(self.timings.cluster_delete, lambda: self._remove(cluster))

    async def _remove(self, cluster: Cluster) -> None:
        if self.clusters.get((cluster.region, cluster.name)) is cluster:
            del self.clusters[(cluster.region, cluster.name)]
        if cluster.kube is not None:
            self.kube.remove_cluster(cluster.kube_id)
            cluster.kube = None

    def upgrade(self, cluster: Cluster, update_id: str, version: str) -> None:
        cluster.status = "UPDATING"

        async def finish() -> None:
            update = cluster.updates[update_id]
            cluster.version = version
            cluster.platform_version = "eks.1"
            cluster.status = "ACTIVE"
            update.status = "Successful"
            if cluster.kube is not None:
                cluster.kube.version = KUBERNETES_VERSIONS[version]

        self.schedule(self.timings.cluster_upgrade, finish)

    def upgrade_nodegroup(self, cluster: Cluster, group: Nodegroup, update_id: str, version: str) -> None:
        """EKS rolls the group's nodes one after another. The emulator upgrades each in place (the same Node
        name, its kubelet at the new version); real EKS launches replacements with new names."""
        group.status = "UPDATING"

        async def finish() -> None:
            update = group.updates[update_id]
            if cluster.kube is not None:
                for name in list(group.nodes):
                    await cluster.kube.kubelet.upgrade_node(name, _kubelet_version(version))
            group.version = version
            group.status = "ACTIVE"
            group.modified_at = self.clock.now()
            update.status = "Successful"

        self.schedule(self.timings.nodegroup_update, finish)

    # -- node groups -----------------------------------------------------------------------

    def add_nodegroup(self, cluster: Cluster, group: Nodegroup, *, ready_in: float) -> None:
        cluster.nodegroups[group.name] = group

        async def launch() -> None:
            if cluster.nodegroups.get(group.name) is not group or group.status != "CREATING":
                return
            if group.instance_type in self.faults.stockouts and group.desired_size > 0:
                group.status = "CREATE_FAILED"
                group.issues = [self._stockout_issue(group)]
                return
            await self._converge(cluster, group)
            group.status = "ACTIVE"
            group.modified_at = self.clock.now()

        self.schedule(ready_in, launch)

    def _stockout_issue(self, group: Nodegroup) -> dict[str, object]:
        return {
            "code": "AsgInstanceLaunchFailures",
            "message": (
                "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have "
                f"sufficient {group.instance_type} capacity in the Availability Zone you requested "
                f"({group.zones[0]}). Launching EC2 instance failed."
            ),
            "resourceIds": [f"eks-{group.name}"],
        }

    def resize(self, cluster: Cluster, group: Nodegroup, update_id: str) -> None:
        group.status = "UPDATING"

        async def finish() -> None:
            update = group.updates[update_id]
            if group.instance_type in self.faults.stockouts and group.desired_size > len(group.nodes):
                group.status = "DEGRADED"
                group.issues = [self._stockout_issue(group)]
                update.status = "Failed"
                update.errors = [{"errorCode": "AsgInstanceLaunchFailures", "errorMessage": group.issues[0]["message"]}]
                return
            await self._converge(cluster, group)
            group.status = "ACTIVE"
            group.issues = []
            group.modified_at = self.clock.now()
            update.status = "Successful"

        self.schedule(self.timings.nodegroup_update, finish)

    def delete_nodegroup(self, cluster: Cluster, group: Nodegroup) -> None:
        group.status = "DELETING"

        async def finish() -> None:
            for name in list(group.nodes):
                await self._remove_node(cluster, group, name)
            cluster.nodegroups.pop(group.name, None)

        self.schedule(self.timings.nodegroup_delete, finish)

    async def _converge(self, cluster: Cluster, group: Nodegroup) -> None:
        """Launch or terminate instances until `desired_size` Nodes exist, spread evenly
        over the node group's zones (the Auto Scaling group balances its AZs)."""
        while len(group.nodes) > group.desired_size:
            per_zone = {z: [n for n, nz in group.nodes.items() if nz == z] for z in group.zones}
            fullest = max(group.zones, key=lambda z: len(per_zone[z]))
            await self._remove_node(cluster, group, per_zone[fullest][-1])
        while len(group.nodes) < group.desired_size:
            counts = {z: sum(1 for nz in group.nodes.values() if nz == z) for z in group.zones}
            emptiest = min(group.zones, key=lambda z: counts[z])
            await self._add_node(cluster, group, emptiest)

    def node_name(self, zone: str, region: str) -> str:
        n = next(self._ips)
        octet = ord(zone[-1]) - ord("a") + 1
        domain = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
        return f"ip-10-0-{octet * 16 + n // 250}-{n % 250 + 4}.{domain}"

    async def _add_node(self, cluster: Cluster, group: Nodegroup, zone: str) -> None:
        name = self.node_name(zone, cluster.region)
        group.nodes[name] = zone
        if cluster.kube is None:
            return
        itype = INSTANCE_TYPES[group.instance_type]
        labels = {
            "eks.amazonaws.com/nodegroup": group.name,
            "eks.amazonaws.com/capacityType": group.capacity_type,
            "node.kubernetes.io/instance-type": group.instance_type,
            "topology.kubernetes.io/region": cluster.region,
            "topology.kubernetes.io/zone": zone,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **group.labels,
        }
        capacity = {"cpu": str(itype.vcpus), "memory": f"{itype.memory_mib}Mi", "pods": "110"}
        taints = [
            {"key": t["key"], "value": t.get("value", ""), "effect": _taint_effect(t["effect"])} for t in group.taints
        ]
        instance_id = f"i-{next(self._ips):017x}"
        group.instances[instance_id] = name
        await cluster.kube.kubelet.add_node(
            name,
            labels=labels,
            capacity=capacity,
            taints=taints,
            ready=True,
            provider_id=f"aws:///{zone}/{instance_id}",
            version=_kubelet_version(group.version),
            gpus=gpu_node(itype, group.ami_type),
        )
        start_host_plugin(cluster.kube.kubelet, name, group.ami_type, group.user_data)

    async def _remove_node(self, cluster: Cluster, group: Nodegroup, name: str) -> None:
        group.nodes.pop(name, None)
        for instance_id, node in list(group.instances.items()):
            if node == name:
                del group.instances[instance_id]
        if cluster.kube is not None:
            await cluster.kube.kubelet.remove_node(name)

    async def autoscale(self, region: str, cluster_name: str, group_name: str, desired: int) -> int:
        """The Cluster Autoscaler sets the Auto Scaling group's desired capacity (within the node group's
        bounds), which EKS reports as the node group's `desiredSize`; the instances follow. Returns it."""
        await self.settle()
        cluster = self.cluster(region, cluster_name)
        group = cluster.nodegroups.get(group_name) if cluster is not None else None
        if cluster is None or group is None:
            raise KeyError(f"no node group {group_name} in {region}/{cluster_name}")
        group.desired_size = min(max(desired, group.min_size), group.max_size)
        await self._converge(cluster, group)
        return group.desired_size

    def group_of_asg(self, region: str, asg: str) -> tuple[Cluster, Nodegroup] | None:
        """The cluster and node group behind the Auto Scaling group called `asg`."""
        for cluster in self.clusters.values():
            for group in cluster.nodegroups.values():
                if cluster.region == region and group.auto_scaling_group == asg:
                    return cluster, group
        return None

    def group_of_instance(self, region: str, instance_id: str) -> tuple[Cluster, Nodegroup] | None:
        for cluster in self.clusters.values():
            for group in cluster.nodegroups.values():
                if cluster.region == region and instance_id in group.instances:
                    return cluster, group
        return None

    def terminate_instance(self, cluster: Cluster, group: Nodegroup, instance_id: str, *, decrement: bool) -> None:
        """The Auto Scaling group terminates one instance: it is Terminating at once and its Node goes
        `instance_termination` later; without `decrement` a replacement (a new instance, a new Node
        name) launches `instance_launch` after that. With it, the desired capacity, which EKS reports
        as the node group's desiredSize, is one lower at once."""
        name = group.instances.pop(instance_id)
        zone = group.nodes.pop(name)
        group.terminating[instance_id] = (name, zone)
        if decrement:
            group.desired_size -= 1

        async def gone() -> None:
            group.terminating.pop(instance_id, None)
            if cluster.kube is not None:
                await cluster.kube.kubelet.remove_node(name)
            if not decrement:

                async def launch() -> None:
                    if cluster.nodegroups.get(group.name) is group and group.status in ("ACTIVE", "UPDATING"):
                        await self._converge(cluster, group)

                self.schedule(self.timings.instance_launch, launch)

        self.schedule(self.timings.instance_termination, gone)

    async def reclaim_spot(self, node_name: str) -> None:
        """The Spot instance behind `node_name` is taken back; the Auto Scaling group
        launches a replacement (a new Node name) after `spot_replacement` seconds."""
        await self.settle()
        for cluster in self.clusters.values():
            for group in cluster.nodegroups.values():
                if node_name in group.nodes:
                    if group.capacity_type != "SPOT":
                        raise ValueError(f"{node_name} is an On-Demand node of {group.name}")
                    await self._remove_node(cluster, group, node_name)

                    async def replace(cluster: Cluster = cluster, group: Nodegroup = group) -> None:
                        if cluster.nodegroups.get(group.name) is group and group.status in ("ACTIVE", "DEGRADED"):
                            await self._converge(cluster, group)

                    self.schedule(self.timings.spot_replacement, replace)
                    return
        raise KeyError(f"no node group has a node {node_name}")


def _kubelet_version(minor: str) -> str:
    """What an EKS node's kubelet reports for the node group's minor: `1.31.2-eks-<build>`."""
    return f"{KUBERNETES_VERSIONS[minor]}-eks-94953ac"
