"""The GKE emulator's records (clusters, operations, tokens, its tasks) and the lookups every request starts with."""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime

from better_compute.core.clock import Clock
from better_compute.testing.gke.errors import not_found
from better_compute.testing.gke.faults import GkeFaults
from better_compute.testing.gke.quotas import RegionQuotas
from better_compute.testing.gke.state import ClusterRecord, NodePoolRecord, OperationRecord
from better_compute.testing.kube import KubeApiServer, KubeCluster

__all__ = ["GkeRegistry"]


class GkeRegistry:
    """What the emulator holds and how a request finds it; every other part of the emulator builds on it."""

    url: str
    """The emulator's loopback URL (set by `GkeEmulator`)."""

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
