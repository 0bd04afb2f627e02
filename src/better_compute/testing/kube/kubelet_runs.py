"""A started pod's run on a simulated Node: init containers one after another, then the rest concurrently, each
through the pod runtime hook or a node program, restarted after CrashLoopBackOff, with the pod's status written
as the kubelet would."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from better_compute.testing.kube.allocation import AdmissionError
from better_compute.testing.kube.events import record_event
from better_compute.testing.kube.kubelet_devices import NodeDevices
from better_compute.testing.kube.kubelet_state import MANAGER
from better_compute.testing.kube.podstatus import (
    admission_failed,
    finished_status,
    initializing_status,
    restarted_status,
    running_status,
)
from better_compute.testing.kube.runtime import ContainerLog, ContainerRun, NodeRun, PodRun, PodRuntime
from better_compute.testing.kube.status import KubeError

__all__ = ["MAX_RESTART_BACKOFF", "RESTART_BACKOFF", "PodRuns", "idle"]

RESTART_BACKOFF = 10.0
MAX_RESTART_BACKOFF = 300.0
_log = logging.getLogger(__name__)


class PodRuns(NodeDevices):
    """A started pod's containers run, fail, back off and restart, and its status says so."""

    async def _node_run(self, node_name: str) -> NodeRun:
        socket = await self.device_plugin_socket(node_name)
        node = self._cluster.store.peek(self._cluster.resource("v1", "Node"), "", node_name) or {}
        return NodeRun(
            name=node_name,
            labels=dict(node.get("metadata", {}).get("labels") or {}),
            capacity=dict(node.get("status", {}).get("capacity") or {}),
            device_plugin_dir=socket.parent,
            host_root=self.host_root(node_name),
            gpus=self._nodes[node_name].gpus,
            nvml=self._nodes[node_name].nvml,
        )

    def _running(
        self, pod: dict[str, Any], node_name: str, pod_ip: str, inits: list[ContainerRun], mains: list[ContainerRun]
    ) -> None:
        self._set_status(pod, running_status(self._host_ip(node_name), pod_ip, inits, mains, self._now()))

    async def _run(
        self,
        pod: dict[str, Any],
        node_name: str,
        pod_ip: str,
        inits: list[ContainerRun],
        mains: list[ContainerRun],
        hook: PodRuntime,
    ) -> None:
        meta = pod["metadata"]
        if node_name not in self._nodes:
            return
        node = await self._node_run(node_name)
        try:
            gpus = await self._devices(pod, node_name, inits + mains)
        except AdmissionError as exc:
            self._set_status(self._live(pod) or pod, admission_failed(exc.reason, str(exc), self._now()))
            self._event(pod, node_name, exc.reason, str(exc))
            return

        def run_of(container: ContainerRun) -> PodRun:
            log = self.logs.setdefault((meta["uid"], container.name), ContainerLog(self._now))
            return PodRun(
                meta["name"], meta["namespace"], meta["uid"], node.name, container, pod, gpus[container.name], log
            )

        restarting = pod.get("spec", {}).get("restartPolicy", "Always") != "Never"
        for index, container in enumerate(inits):
            restarts = 0
            while True:
                status = initializing_status(
                    self._host_ip(node.name), pod_ip, inits, mains, index, self._now(), restarts=restarts
                )
                self._set_status(self._live(pod) or pod, status)
                self._cluster.settle(everything=False)
                try:
                    await self._program(container, hook)(run_of(container), node)
                    break
                except Exception as exc:
                    _stop_if_cancelled(exc)
                    _log.warning("init container %s of pod %s failed: %s", container.name, meta["name"], exc)
                    self._finished(pod, container, exc)
                if not restarting:
                    return
                restarts += 1
                if await self._backed_off(pod, restarts, container) is None:
                    return
        self._running(self._live(pod) or pod, node.name, pod_ip, inits, mains)
        self._cluster.settle(everything=False)
        async with asyncio.TaskGroup() as group:
            for container in mains:
                group.create_task(
                    self._container(
                        pod, container, run_of(container), node, self._program(container, hook), restarting
                    ),
                    name=container.name,
                )

    def _program(self, container: ContainerRun, hook: PodRuntime) -> PodRuntime:
        image = container.image.split("@", 1)[0]
        name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        return self.programs.get(name, hook)

    async def _container(
        self,
        pod: dict[str, Any],
        container: ContainerRun,
        run: PodRun,
        node: NodeRun,
        hook: PodRuntime,
        restarting: bool,
    ) -> None:
        """Run the container; one that fails is started again after its back-off unless the pod's
        restartPolicy is Never (one that exits 0 stays Completed: see the module's docstring)."""
        restarts = 0
        while True:
            try:
                await hook(run, node)
            except Exception as exc:
                _stop_if_cancelled(exc)
                _log.warning("container %s of pod %s failed: %s", container.name, run.name, exc)
                self._finished(pod, container, exc)
            else:
                self._finished(pod, container, None)
                return
            if not restarting:
                return
            restarts += 1
            live = await self._backed_off(pod, restarts, container)
            if live is None:
                return
            self._set_status(live, restarted_status(live, container, self._now()))
            self._cluster.settle(everything=False)

    async def _backed_off(self, pod: dict[str, Any], restarts: int, container: ContainerRun) -> dict[str, Any] | None:
        """Wait out the kubelet's CrashLoopBackOff before restart number `restarts` (10 s, doubling,
        at most 5 minutes, on the cluster's clock), saying so in a BackOff event; the pod as stored
        then, or None when it is gone."""
        live = self._live(pod)
        if live is None:
            return None
        meta = live["metadata"]
        message = (
            f"Back-off restarting failed container {container.name} in pod "
            f"{meta['name']}_{meta['namespace']}({meta['uid']})"
        )
        self._event(live, str(live.get("spec", {}).get("nodeName", "")), "BackOff", message)
        await self._cluster.clock.sleep(min(RESTART_BACKOFF * 2 ** (restarts - 1), MAX_RESTART_BACKOFF))
        log = self.logs.get((meta["uid"], container.name))
        if log is not None:
            log.restarted()
        return self._live(pod)

    def _live(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod as stored now (read only), if it is still the same pod."""
        meta = pod["metadata"]
        live = self._cluster.store.peek(self._cluster.resource("v1", "Pod"), meta["namespace"], meta["name"])
        return live if live is not None and live["metadata"]["uid"] == meta["uid"] else None

    def _finished(self, pod: dict[str, Any], container: ContainerRun, error: Exception | None) -> None:
        """A container's process ended: record how, and the pod phase that follows."""
        live = self._live(pod)
        if live is None:
            return
        self._set_status(live, finished_status(live, container, error, self._now()))
        self._cluster.settle(everything=False)

    def _event(self, pod: dict[str, Any], node_name: str, reason: str, message: str, type_: str = "Warning") -> None:
        record_event(self._cluster, pod, reason, message, component=MANAGER, host=node_name, type_=type_)

    def _set_status(self, pod: dict[str, Any], status: dict[str, Any]) -> str | None:
        """Write the pod's status through the status subresource (never touching `pod`); the
        pod's resourceVersion after it (unchanged when the status already was `status`), or None
        when the pod is gone."""
        meta = pod["metadata"]
        if pod.get("status") == status:
            return str(meta["resourceVersion"])
        try:
            written = self._cluster.ops.update(
                self._cluster.resource("v1", "Pod"),
                meta["namespace"],
                meta["name"],
                {**pod, "status": status},
                manager=MANAGER,
                subresource="status",
            )
        except KubeError:
            return None
        return str(written["metadata"]["resourceVersion"])


async def idle(run: PodRun, node: NodeRun) -> None:
    """A container of no known program: it runs until its pod goes."""
    await asyncio.Event().wait()


def _stop_if_cancelled(exc: Exception) -> None:
    """A container that fails while its pod is being stopped has not crashed: it is not restarted.

    Its process may turn the cancellation into an error of its own on the way out (a server's
    shutdown failing, say); restarting it then would wait out a back-off on a clock that may
    never move again, and the pod would never stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc
