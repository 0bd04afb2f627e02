"""`ProviderKubernetes`: the seam between the clusters/substrates reconcilers and a cloud.

A driver implements this Protocol for one provider (GKE, EKS, DOKS, or a user's
own). Every method is idempotent and safe to call again after a crash: names are
deterministic, creation finds what an earlier call made, and deletion of what is
already gone succeeds. Drivers raise only `ComputeError` (core/errors.py); their
SDK's exceptions never travel past them.

Vocabulary (`KubernetesVocabulary`) is what the account calls a region, a machine
type and an accelerator, and how `nodes` counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from better_compute.core.errors import Problem
from better_compute.vps.provider import ProviderAccount

__all__ = [
    "DEPLOYMENT_LABEL",
    "SUBSTRATE_POOL_LABEL",
    "Accelerators",
    "Autoscaling",
    "ClusterCredentials",
    "ClusterOutputs",
    "ClusterSpec",
    "ClusterState",
    "ClusterStatus",
    "GpuInfo",
    "GpuNode",
    "KubernetesVocabulary",
    "NodePoolSpec",
    "NodePoolState",
    "NodePoolStatus",
    "ProviderKubernetes",
    "Quota",
    "QuotaNeed",
    "Taint",
    "TypicalDurations",
    "adopted_node_pool_name",
    "version_matches",
]

SUBSTRATE_POOL_LABEL = "better-compute.dev/substrate-pool"
"""better-compute's mark: on every cluster it creates, every node pool (and so every Node) and every object of a
substrate, the pool id. It is the seam's because drivers read it back off a cluster (`ClusterState.substrate_pool`)."""

DEPLOYMENT_LABEL = "better-compute.dev/deployment"
"""Next to the substrate-pool mark on every cluster and node pool better-compute creates: the id of the
deployment (one database, kubernetes/deployment.py) that made it, so that the orphan sweep of another
deployment sharing the account leaves it alone (`ClusterState.deployment`, `NodePoolState.deployment`)."""

CREDENTIAL_TTL_SECONDS = 600
"""Every admin credential a driver mints lives 600 s (the spec's number)."""


class ClusterStatus(StrEnum):
    PROVISIONING = "provisioning"
    READY = "ready"
    UPDATING = "updating"
    DELETING = "deleting"
    DELETED = "deleted"
    ERROR = "error"


class NodePoolStatus(StrEnum):
    PROVISIONING = "provisioning"
    READY = "ready"
    UPDATING = "updating"
    DELETING = "deleting"
    DELETED = "deleted"
    ERROR = "error"


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster to create. `name` is deterministic (derived from the pool id) and
    valid for the provider; `private_nodes` is the cluster's mode and never changes
    in place."""

    name: str
    location: str
    version: str | None = None
    private_nodes: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterOutputs:
    """What a ready cluster reports. `global_id` is the provider-global id (GKE
    selfLink, EKS ARN, DOKS UUID): the same string whichever account reads it."""

    endpoint: str
    version: str
    location: str
    node_version: str
    global_id: str
    ca_data: str | None = None


@dataclass(frozen=True)
class ClusterState:
    """A cluster as the provider reports it. `cluster_id` is what this account uses
    to address it again (GKE `<location>/<name>`, EKS `<region>/<name>`, DOKS UUID)."""

    cluster_id: str
    name: str
    status: ClusterStatus
    outputs: ClusterOutputs | None = None
    private_nodes: bool = False
    message: str | None = None
    node_pools: tuple[str, ...] = ()
    substrate_pool: str | None = None
    """The pool id better-compute's mark on the cluster names (`better-compute.dev/substrate-pool`, written
    through `ClusterSpec.labels` as the provider keeps labels or tags); None on a cluster without it, as
    every cluster someone else made. The orphan sweep (kubernetes/sweep/) tells ours by it."""
    deployment: str | None = None
    """The deployment id its `better-compute.dev/deployment` mark names (written, like `substrate_pool`,
    through `ClusterSpec.labels`); None on a cluster without it: someone else's, or one an older
    better-compute made."""


@dataclass(frozen=True)
class Accelerators:
    type: str
    count: int


@dataclass(frozen=True)
class Autoscaling:
    min_nodes: int
    max_nodes: int


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class NodePoolSpec:
    """A node pool. Its shape (machine type, accelerators, spot, zones, disk) never
    changes in place; only `node_count` and `autoscaling` do. `node_count` is in the
    provider's own unit (per zone on GKE and EKS, total on DOKS)."""

    name: str
    machine_type: str
    node_count: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    accelerators: Accelerators | None = None
    spot: bool = False
    zones: tuple[str, ...] = ()
    disk_gib: int | None = None
    autoscaling: Autoscaling | None = None


@dataclass(frozen=True)
class NodePoolState:
    name: str
    status: NodePoolStatus
    machine_type: str
    node_count: int
    labels: Mapping[str, str] = field(default_factory=dict)
    spot: bool = False
    accelerators: Accelerators | None = None
    zones: tuple[str, ...] = ()
    autoscaling: Autoscaling | None = None
    message: str | None = None
    version: str | None = None
    """The Kubernetes version the pool's nodes run (DOKS: the cluster's, which its pools follow)."""

    @property
    def deployment(self) -> str | None:
        """The deployment id its `better-compute.dev/deployment` label names (a node pool's labels are its
        Nodes' Kubernetes labels on every provider); None on a node pool without it."""
        return self.labels.get(DEPLOYMENT_LABEL) or None


@dataclass(frozen=True)
class ClusterCredentials:
    """A credential for the cluster endpoint: a run's admin credential (memory only, that run's),
    or a narrower token made with one (kubernetes/cluster_access/join_reviewer.py); `repr` never shows the token."""

    endpoint: str
    ca_data: str | None
    token: str = field(repr=False)
    expires_at: datetime


@dataclass(frozen=True)
class GpuInfo:
    """The GPUs a machine type carries, in better-compute's model names (H100, A100, L4)."""

    model: str
    count: int
    accelerator_type: str


@dataclass(frozen=True)
class TypicalDurations:
    """How long the provider says its operations usually take, in seconds.

    The clusters reconciler looks again near these (clusters/polling.py) instead of
    every few seconds; a wrong estimate costs a few reads or a little lateness, never
    correctness.
    """

    cluster_create: float = 300.0
    node_pool_create: float = 180.0
    node_pool_resize: float = 60.0


@dataclass(frozen=True)
class GpuNode:
    """What the provider's GPU node image gives containers GPUs with, which bcd's DaemonSet and
    Allocate are shaped by (docs/providers.md has each provider's table and sources).

    `driver_dir` is the host directory holding the NVIDIA driver and libnvidia-ml where the node
    has no NVIDIA container runtime (GKE's Container-Optimized OS: /home/kubernetes/bin/nvidia):
    bcd mounts it, Allocate names the device nodes, and the substrate installs the driver there
    (GKE's managed install runs in the plugin its pools turn off: substrates/gpu_driver.py).
    None where NVIDIA's container runtime is containerd's default and injects them on request
    (EKS's AL2023 NVIDIA AMI, DOKS). `critical_pods_quota` is True where the API server admits
    system-*-critical pods only in a namespace with a ResourceQuota covering them (GKE)."""

    driver_dir: str | None = None
    critical_pods_quota: bool = False

    @property
    def nvidia_runtime(self) -> bool:
        """True where NVIDIA's container runtime is the node's default (no host driver directory)."""
        return self.driver_dir is None


@dataclass(frozen=True)
class QuotaNeed:
    """Machines of one shape that a change adds to an account (fewer where `count` is negative)."""

    machine_type: str
    count: int
    spot: bool = False
    accelerators: Accelerators | None = None


@dataclass(frozen=True)
class Quota:
    """One quota the provider reports, in its own unit, and what the needs add to it.

    `metric` is the provider's own key (GKE `NVIDIA_H100_GPUS`, EKS `L-417A185B`, DOKS
    `droplet_limit`); `usage` is what the account uses now, wherever it is used."""

    metric: str
    name: str
    unit: str
    limit: float
    usage: float
    adds: float
    scope: str = ""
    """Where the quota counts: a region (GKE, EKS), or the whole account (DOKS: empty)."""

    @property
    def exceeded(self) -> bool:
        return self.adds > 0 and self.usage + self.adds > self.limit


@dataclass(frozen=True)
class KubernetesVocabulary:
    """How the provider talks about places, shapes and counts, and how long its operations take."""

    provider: str
    cluster_location: str  # "region-or-zone" | "region"
    nodes_per_zone: bool
    zero_nodes: bool
    spot: bool
    zones_and_disk: bool
    node_naming: str
    durations: TypicalDurations = field(default_factory=TypicalDurations)
    node_pool_label: str = ""
    """The label the provider puts on each Node naming its node pool (GKE `cloud.google.com/gke-nodepool`)."""
    pools_upgrade_with_cluster: bool = False
    """True where the control plane's upgrade also upgrades every node pool (DOKS): the
    nodes are then drained before the cluster is upgraded, not after."""
    gpu_node: GpuNode = field(default_factory=GpuNode)


@runtime_checkable
class ProviderKubernetes(Protocol):
    """What the clusters and substrate reconcilers need of a provider."""

    vocabulary: KubernetesVocabulary

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        """Create the cluster, or return the one an earlier call made. A different
        mode (`private_nodes`) for an existing cluster is refused (INVALID_STATE)."""
        ...

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        """The cluster, or None when it does not exist (any more)."""
        ...

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        """The cluster `ensure_cluster` makes under this name and location, or None: how a teardown
        finds a cluster whose id was never recorded (the run died, or failed, after the create)."""
        ...

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        """Every cluster the account sees where `ensure_cluster` makes them (GKE: the project, all locations;
        EKS: the account's region; DOKS: the team), each with its `substrate_pool` mark: what the orphan
        sweep compares with the database."""
        ...

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        """Start deleting; succeeds when the cluster is already deleting or gone."""
        ...

    async def upgrade_cluster(self, account: ProviderAccount, cluster_id: str, version: str) -> ClusterState:
        """Upgrade the control plane in place (DOKS: with its node pools, see the vocabulary)."""
        ...

    async def upgrade_versions(self, account: ProviderAccount, cluster_id: str) -> tuple[str, ...]:
        """The versions the provider offers this cluster's control plane an upgrade to now."""
        ...

    async def upgrade_node_pool(
        self, account: ProviderAccount, cluster_id: str, name: str, version: str
    ) -> NodePoolState:
        """Start upgrading the node pool's nodes to `version` (the control plane's, already there);
        answers the pool as it is once asked. Where pools follow the cluster's upgrade (DOKS)
        it only reads the pool."""
        ...

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        """Create the node pool or return the existing one. An existing pool of another
        shape is refused (INVALID_STATE): node pools never change shape."""
        ...

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState | None: ...

    async def resize_node_pool(
        self,
        account: ProviderAccount,
        cluster_id: str,
        name: str,
        node_count: int,
        autoscaling: Autoscaling | None = None,
    ) -> NodePoolState:
        """Change the size in place. With `autoscaling`, only the bounds are written and `node_count` is not
        used: the autoscaler owns the count (where the provider needs one within the bounds, the current
        count moved to the nearest bound is sent)."""
        ...

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        """Start deleting; succeeds when the node pool is already gone."""
        ...

    async def remove_machines(
        self,
        account: ProviderAccount,
        cluster_id: str,
        pool_name: str,
        provider_ids: tuple[str, ...],
        *,
        replace: bool,
    ) -> None:
        """Remove the pool's machines whose Nodes carry these `spec.providerID`s, by name.

        `replace`: each machine is deleted and the provider makes a new one in its place (the count
        stays). Otherwise the machines go and the pool's count is lowered by as many in the same call.
        Answers once the provider has taken the request (the machines go, and come, later), so that a
        call again after a crash is safe: a machine already gone or already going is skipped. A
        providerID that cannot name a machine of this pool (another provider's, another zone's) is
        refused (INVALID_INPUT), as is one the provider does not know where it names machines only by
        membership (GKE's recreateInstances); a removal the provider's bounds forbid (below an autoscaled
        pool's minimum, or a fixed DOKS pool's last node) is INVALID_STATE and changes nothing."""
        ...

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        """A 600 s admin credential for the cluster endpoint, never stored. The kubernetes side takes back
        what it makes in the cluster with one (`kubernetes.cluster_access`); a driver makes nothing there."""
        ...

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        """Read a cluster to adopt (`<location>/<name>`, `<region>/<name>` or a UUID);
        NOT_FOUND when absent, INVALID_STATE when it cannot be adopted."""
        ...

    async def machine_gpus(self, account: ProviderAccount, machine_type: str) -> GpuInfo | None:
        """The GPUs of a machine type, or None for a machine type without GPUs."""
        ...

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        """The provider's quotas that these machines count against, with their limit, usage and what the
        needs add (a read; nothing is reserved). `place` is the substrate's `cluster.create.location`, or
        the adopted cluster's id. A need that counts against no quota the provider reports (a machine
        without GPUs on GKE) adds to none. A quota that cannot be read (denied, the API off) raises
        ComputeError, as every call does."""
        ...

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        """How many zones a node pool spreads over: `nodes` multiplies by this where
        the vocabulary counts per zone."""
        ...

    async def validate_substrate(
        self, account: ProviderAccount, substrate: Mapping[str, Any], *, path: str
    ) -> list[Problem]:
        """The FleetConfig hook: every provider-vocabulary problem of one pool's
        `policy.substrate` (a plain dict in the document's own camelCase keys), each
        with a JSON pointer under `path`. Never raises for bad input."""
        ...


def adopted_node_pool_name(pool_id: str, flavor: str) -> str:
    """`bc-<last 6 of the pool id>-<flavor>`: never the name of a node pool of the user's own."""
    return f"bc-{pool_id[-6:]}-{flavor}"


def version_matches(actual: str, wanted: str) -> bool:
    """Whether `actual` is the version `wanted` names: providers answer fuller versions than asked
    (`1.31` names `1.31.2-gke.1`, `1.31.6-do.0` and a kubelet's `v1.31.6`)."""
    actual, wanted = actual.removeprefix("v"), wanted.removeprefix("v")
    return actual == wanted or actual.startswith((wanted + ".", wanted + "-"))
