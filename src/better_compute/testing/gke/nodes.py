"""A node pool's VMs and the Nodes they register in the pool's Kubernetes API emulator cluster, named like GKE's
VM hostnames, `gke-<cluster>-<pool>-<8 hex>-<4 chars>`."""

from __future__ import annotations

import secrets
import string

from better_compute.testing.gke.catalog import MACHINE_TYPES, region_of
from better_compute.testing.gke.gpu_nodes import gpu_node
from better_compute.testing.gke.registry import GkeRegistry
from better_compute.testing.gke.state import ClusterRecord, NodePoolRecord

__all__ = ["NodeVms", "node_base_name"]

_KUBE_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


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


class NodeVms(GkeRegistry):
    """A node pool's VMs as Nodes of its cluster: made, removed, and reclaimed (Spot)."""

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
