"""The kubelet simulator's state: its Nodes (GPUs, NVML, device plugin registration, host filesystem), the pods it
started, and why a pod's start is blocked."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from better_compute.bcd.simnvml import SimulatedNvml
from better_compute.testing.kube.deviceplugin import RegistrationServer
from better_compute.testing.kube.gpus import NodeGpus
from better_compute.testing.kube.nodestatus import node_ip
from better_compute.testing.kube.runtime import ContainerLog, NodeRun, PodRun, PodRuntime
from better_compute.testing.kube.store import Change

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster
    from better_compute.testing.kube.kubelet_pulls import PullBackOff
__all__ = ["MANAGER", "BlockedStart", "KubeletNode", "KubeletState", "NodeProgram"]

MANAGER = "kubelet"
_REFERENCED_KINDS = frozenset({"Secret", "ConfigMap", "ServiceAccount"})


@dataclass(frozen=True)
class BlockedStart:
    """What a pod's failed start depended on: it is retried only once one of these moves."""

    resource_version: str | None
    references: int


NodeProgram = Callable[[PodRun, NodeRun], Awaitable[None]]
"""A node's own software, run for a container of a known image (see `KubeletSimulator.programs`)."""


@dataclass
class KubeletNode:
    """What the kubelet keeps of one machine beside its Node object."""

    index: int
    gpus: NodeGpus | None = None
    nvml: SimulatedNvml | None = None
    """The machine's own GPUs as NVML reads them: faults injected here are what its bcd sees, and
    a machine made later under the same name (a reused EKS address, a GKE instance recreated) gets a
    table of its own, so nothing of one test's or one machine's faults reaches another's."""
    registration: asyncio.Task[RegistrationServer] | None = None
    host_root: Path | None = None
    allocated: dict[str, set[str]] = field(default_factory=dict)
    host_plugins: list[asyncio.Task[None]] = field(default_factory=list)
    gpus_changed: asyncio.Event = field(default_factory=asyncio.Event)


class KubeletState:
    """What the simulated kubelet keeps of its Nodes and their pods; each part of it builds on this."""

    def __init__(self, cluster: KubeCluster) -> None:
        self._cluster = cluster
        self._nodes: dict[str, KubeletNode] = {}
        self._started: dict[str, asyncio.Task[None] | None] = {}
        self._pull_backoffs: dict[tuple[str, str], PullBackOff] = {}
        """(pod uid, image) -> the kubelet's back-off after that image's last failed pull for that pod."""
        self._pull_workers: dict[str, asyncio.Task[None]] = {}
        self._blocked: dict[str, BlockedStart] = {}
        self._references = 0
        cluster.store.subscribe(self._note)
        self._next_node = 0
        self._next_pod_ip = 0
        self.pod_runtime: PodRuntime | None = None
        self.image_pull_failures: set[str] = set()
        """Image patterns (fnmatch) whose pulls fail: their pods stay Pending with ErrImagePull, then
        ImagePullBackOff, and start at the first pull tried after the pattern is gone (kubelet_pulls.py)."""
        self.programs: dict[str, NodeProgram] = {}
        """Image name (without tag or digest) -> the program its containers run instead of the pod runtime hook."""
        self._seen: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self.logs: dict[tuple[str, str], ContainerLog] = {}
        """(pod uid, container name) -> what the container wrote, while the pod is there (`kubectl logs`)."""

    # the simulator's own API

    @property
    def node_names(self) -> list[str]:
        return sorted(self._nodes)

    def _note(self, change: Change) -> None:
        """Count changes to what pods reference (Secrets, ConfigMaps, ServiceAccounts): a pod whose
        start was blocked waits for one of them (or for its own spec) before it is tried again."""
        if change.resource.kind in _REFERENCED_KINDS:
            self._references += 1

    def _blocked_key(self, resource_version: str | None) -> BlockedStart:
        return BlockedStart(resource_version, self._references)

    def _now(self) -> str:
        return self._cluster.ops.now()

    def _host_ip(self, node_name: str) -> str:
        return node_ip(self._nodes[node_name].index)
