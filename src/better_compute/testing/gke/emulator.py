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

Its parts, one job each: registry.py (the records and their lookups), identity.py (Google tokens),
operations.py (long-running operations), clusters.py, node_pools.py, nodes.py (the VMs' Nodes) and
instance_groups.py (Compute Engine); app.py routes the REST calls to them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from better_compute.core.clock import Clock
from better_compute.testing.gke.catalog import VALID_MASTER_VERSIONS, resolve_version
from better_compute.testing.gke.clusters import ClusterApi, SeedPool
from better_compute.testing.gke.errors import GkeApiError, error_info
from better_compute.testing.gke.instance_groups import InstanceGroupApi
from better_compute.testing.kube import KubeApiServer
from better_compute.testing.lifecycle import StartStop
from better_compute.testing.loopback import LoopbackServer

__all__ = ["GkeEmulator", "SeedPool"]


class GkeEmulator(ClusterApi, InstanceGroupApi, StartStop):
    """Emulated container.googleapis.com; see the module docstring."""

    def __init__(self, clock: Clock, kube: KubeApiServer) -> None:
        super().__init__(clock, kube)
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

    def server_config(self) -> dict[str, Any]:
        return {
            "defaultClusterVersion": resolve_version(None),
            "validMasterVersions": list(VALID_MASTER_VERSIONS),
            "validNodeVersions": list(VALID_MASTER_VERSIONS),
            "defaultImageType": "COS_CONTAINERD",
            "validImageTypes": ["COS_CONTAINERD", "UBUNTU_CONTAINERD"],
        }
