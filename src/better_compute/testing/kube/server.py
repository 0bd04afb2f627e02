"""`KubeApiServer`: one HTTPS loopback server holding every emulated cluster.

Each cluster lives under `/clusters/<id>`, so its endpoint is a URL with a path,
which both lightkube and kubectl accept as a server address. The TLS
certificate comes from a CA generated per server (trustme); clients trust it
through the `certificate-authority-data` that `KubeCluster.ca_data` gives.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import trustme
from starlette.requests import Request
from starlette.responses import JSONResponse

from better_compute.core.clock import Clock
from better_compute.testing.kube.app import handle, health
from better_compute.testing.kube.cluster import KubeCluster
from better_compute.testing.kube.runtime import PodRuntime
from better_compute.testing.kube.status import KubeError
from better_compute.testing.lifecycle import StartStop
from better_compute.testing.loopback import LoopbackServer

__all__ = ["KubeApiServer"]


class KubeApiServer(StartStop):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._ca = trustme.CA()
        self.ca_pem: bytes = self._ca.cert_pem.bytes()
        self._dir = Path(tempfile.mkdtemp(prefix="kube-emulator-"))
        pem = self._dir / "server.pem"
        self._ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(pem))
        self._loopback = LoopbackServer(self, certfile=str(pem), keyfile=str(pem), name="kube-apiserver")
        self._clusters: dict[str, KubeCluster] = {}
        self.stopping = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()
        self.pod_runtime: PodRuntime | None = None
        """Given to the kubelet of every cluster added from then on (`testing.Cloud` runs the real bcd)."""
        self.pod_security_default = "privileged"
        """The Pod Security level of every cluster added from then on, for namespaces that declare
        none: "baseline" or "restricted" is a cluster configured as many hardened ones are."""

    @property
    def url(self) -> str:
        return self._loopback.url

    def add_cluster(self, cluster_id: str, version: str = "1.31.2") -> KubeCluster:
        if cluster_id in self._clusters:
            raise ValueError(f"cluster {cluster_id} already exists")
        if "/" in cluster_id or not cluster_id:
            raise ValueError(f"invalid cluster id {cluster_id!r}")
        cluster = KubeCluster(self, cluster_id, version, self.clock)
        cluster.kubelet.pod_runtime = self.pod_runtime
        cluster.admission.pod_security_default = self.pod_security_default
        self._clusters[cluster_id] = cluster
        return cluster

    def cluster(self, cluster_id: str) -> KubeCluster:
        return self._clusters[cluster_id]

    def remove_cluster(self, cluster_id: str) -> None:
        """Forget a cluster: its endpoint answers 404 from now on. Its kubelet's
        tasks and sockets are closed in the background."""
        cluster = self._clusters.pop(cluster_id)
        task = asyncio.get_running_loop().create_task(cluster.close(), name=f"kube-cluster-close:{cluster_id}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @property
    def clusters(self) -> dict[str, KubeCluster]:
        return dict(self._clusters)

    async def start(self) -> None:
        await self._loopback.start()

    async def stop(self) -> None:
        self.stopping.set()
        for cluster in list(self._clusters.values()):
            await cluster.close()
        if self._closing:
            await asyncio.gather(*self._closing)
        await self._loopback.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        parts = scope["path"].split("/", 3)
        cluster = self._clusters.get(parts[2]) if len(parts) >= 3 and parts[1] == "clusters" else None
        if cluster is None and parts[1] != "clusters":  # `kubectl get --raw /healthz` drops the server's path
            try:
                answer = health(
                    [p for p in scope["path"].split("/") if p], b"verbose" in scope.get("query_string", b"")
                )
            except KubeError as refused:
                answer = JSONResponse(refused.body(), status_code=refused.code)
            if answer is not None:
                await answer(scope, receive, send)
                return
        if cluster is None:
            error = KubeError.path_not_found()
            await JSONResponse(error.body(), status_code=error.code)(scope, receive, send)
            return
        request = Request(scope, receive)
        response = await handle(cluster, request, "/" + (parts[3] if len(parts) > 3 else ""))
        await response(scope, receive, send)
