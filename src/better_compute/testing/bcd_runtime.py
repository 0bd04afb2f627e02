"""The pod runtime that runs the real bcd for the substrate's DaemonSet pods.

The kubelet simulator hands each container of a pod to this runtime with the env and
files the pod would see. For bcd's containers (`args: [join]` and `args: [run]`) it
runs `bcd.join.join` and `bcd.daemon.Bcd(...).run()` from that env, exactly as the
image's entry point would: the join token comes from the mounted Secret, the node
credential is kept on the node's own directory (the DaemonSet's hostPath, which
outlives the pod), the device plugin registers at the node's simulated kubelet
socket, and NVML sees the GPUs the node's runtime gives bcd's own container (testing/kube/gpus.py:
none while the node's driver is not loaded, nor where the DaemonSet asks the runtime for none,
and bcd's join waits for them as on a real node). The
join container's projected ServiceAccount token (the DaemonSet's `identity` volume) is
the one the kubelet simulator minted for the pod, bound to it and its Node, written
where `BCD_IDENTITY_TOKEN_FILE` points: bcd proves its Node with it as on a real cluster.
What bcd logs while it runs in a container is that container's log (`kubectl logs`), in the
image's format and at its level (INFO, `better_compute.bcd` set to it where nothing set a
level), secrets redacted as the image's handler does. Containers of any other pod just run
until their pod goes.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.daemon import Bcd
from better_compute.bcd.inventory import GpuReader, InventoryError, await_inventory, simulated_gpus
from better_compute.bcd.join import join
from better_compute.core.clock import Clock
from better_compute.core.redaction import RedactingFilter
from better_compute.testing.kube.allocation import host_mounts, privileged
from better_compute.testing.kube.gpus import ContainerDevices, visible_gpus
from better_compute.testing.kube.runtime import ContainerLog, NodeRun, PodRun
from better_compute.wire.protocol import GpuInfo

__all__ = ["BcdPodRuntime"]

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
_HOST_PATHS = frozenset({"BCD_HOST_DRIVER_DIR"})
"""Settings that name a path on the host, not in the container: they pass through as they are."""
_BCD_LOGGER = "better_compute.bcd"
_CONTAINER_LOG: ContextVar[ContainerLog | None] = ContextVar("bcd_container_log", default=None)


class _ContainerLogHandler(logging.Handler):
    """bcd's records, from the container whose task (and its children) logs them, into that container's log."""

    def emit(self, record: logging.LogRecord) -> None:
        log = _CONTAINER_LOG.get()
        if log is not None:
            log.write(self.format(record))


def _install_container_logs() -> None:
    """Once per process: the handler on bcd's logger, with the image's format (bcd/main.py) and redaction."""
    logger = logging.getLogger(_BCD_LOGGER)
    if any(isinstance(h, _ContainerLogHandler) for h in logger.handlers):
        return
    handler = _ContainerLogHandler(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


class _BackOffUncounted:
    """The runtime's clock as a join sees it: its sleeps (back-offs) leave the `joining` count."""

    def __init__(self, runtime: BcdPodRuntime) -> None:
        self._runtime = runtime

    def now(self) -> datetime:
        return self._runtime.clock.now()

    async def sleep(self, seconds: float) -> None:
        self._runtime.joining -= 1
        try:
            await self._runtime.clock.sleep(seconds)
        finally:
            self._runtime.joining += 1


class BcdPodRuntime:
    """See the module docstring. `root` holds each node's directory; `close()` removes it."""

    def __init__(self, clock: Clock, root: Path | None = None) -> None:
        self.clock = clock
        self.root = root or Path(tempfile.mkdtemp(prefix="bcd-nodes-"))
        self.joins = 0
        self.joining = 0
        """Joins under way now: a harness that steps simulated time waits for them (they take real time).
        A join waiting out its back-off on the clock (a busy or unreachable control plane) is not
        counted while it waits, so such a harness lets the clock move on and the back-off end."""
        self.joined: set[str] = set()
        """The Nodes whose bcd has joined: each should hold a gateway session (a join retried after a
        failure counts in `joins` again, not here)."""
        self.runs = 0
        self.reports_node_name = True
        """False: bcd runs as an older bcd that does not report its Node name (no NODE_NAME from the
        downward API), so the control plane matches its node by the hostname alone."""
        _install_container_logs()

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    async def __call__(self, run: PodRun, node: NodeRun) -> None:
        args = run.container.args[:1]
        if args not in (("join",), ("run",)):
            await asyncio.Event().wait()  # an ordinary container: it runs until its pod goes
            return
        _CONTAINER_LOG.set(run.log)  # this task's context: what bcd logs from here on is this container's
        env = self._env(run, node)
        config = BcdConfig.from_env(env)
        if args == ("join",):
            inventory = await await_inventory(env, self.clock, gpus=_container_nvml(node, run))
            self.joins += 1
            self.joining += 1
            try:
                await join(config, inventory, clock=_BackOffUncounted(self))
                self.joined.add(node.name)
            finally:
                self.joining -= 1
            return
        self.runs += 1
        inventory = await await_inventory(env, self.clock, gpus=_container_nvml(node, run))
        # The machine's own NVML (the kubelet's table), once its driver is loaded as the env says; else, as on a
        # node without the library, whatever bcd finds.
        nvml = node.nvml if "BCD_SIMULATED_GPUS" in env else None
        await Bcd(config, clock=self.clock, inventory=inventory, nvml=nvml).run()

    def _env(self, run: PodRun, node: NodeRun) -> dict[str, str]:
        """The container's env with its mounted paths moved to where this runtime keeps them."""
        node_dir = self.root / node.name
        pod_dir = node_dir / "pods" / run.uid / run.container.name
        places = self._host_paths(run, node)
        for path, content in run.container.files.items():
            target = _place(path, places, pod_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        env = {
            key: str(_place(value, places, pod_dir)) if value.startswith("/") and key not in _HOST_PATHS else value
            for key, value in run.container.env.items()
        }
        if node.gpus is not None and node.gpus.driver_ready:
            env["BCD_SIMULATED_GPUS"] = f"{node.gpus.count}x{node.gpus.model}"
        env.setdefault("BCD_HOSTNAME", node.name)
        if not self.reports_node_name:
            env.pop("NODE_NAME", None)
        return env

    @staticmethod
    def _host_paths(run: PodRun, node: NodeRun) -> dict[str, Path]:
        """Each hostPath mount of the container -> the node's own directory for it."""
        volumes = {v["name"]: v for v in run.manifest.get("spec", {}).get("volumes") or []}
        containers = (run.manifest.get("spec", {}).get("initContainers") or []) + (
            run.manifest.get("spec", {}).get("containers") or []
        )
        spec: dict[str, Any] = next((c for c in containers if c.get("name") == run.container.name), {})
        places: dict[str, Path] = {}
        for mount in spec.get("volumeMounts") or []:
            host = (volumes.get(mount.get("name", "")) or {}).get("hostPath")
            if host is None:
                continue
            path = str(host.get("path", ""))
            place = node.device_plugin_dir if path == DEVICE_PLUGIN_DIR else node.host_root / path.lstrip("/")
            place.mkdir(parents=True, exist_ok=True)
            places[str(mount["mountPath"]).rstrip("/")] = place
        return places


def _container_nvml(node: NodeRun, run: PodRun) -> GpuReader:
    """The simulated NVML in bcd's container: the GPUs the node's runtime gives that container, read
    each time (a privileged container with the host's /dev and driver directory sees a driver that
    loads after it started), once the node's driver is loaded. A container given none has no NVML at
    all (on COS without the driver directory, or with the NVIDIA runtime asked for nothing, the library
    is not there), and bcd waits saying so, as it would on such a node."""
    containers = (run.manifest.get("spec", {}).get("initContainers") or []) + (
        run.manifest.get("spec", {}).get("containers") or []
    )
    spec: dict[str, Any] = next((c for c in containers if c.get("name") == run.container.name), {})
    asked = ContainerDevices(mounts=host_mounts(run.manifest, spec), env=run.container.env, privileged=privileged(spec))

    def read() -> tuple[list[GpuInfo], str | None]:
        gpus = node.gpus
        if gpus is None:
            return [], None
        if not gpus.driver_ready:
            raise InventoryError("NVML did not start: Driver Not Loaded")
        seen = visible_gpus(gpus, node.name, node.host_root, asked)
        if not seen:
            raise InventoryError("NVML did not start: NVML Shared Library Not Found")
        return [g for g in simulated_gpus(f"{gpus.count}x{gpus.model}", node.name) if g.uuid in seen], None

    return read


def _place(path: str, places: dict[str, Path], pod_dir: Path) -> Path:
    for mount, place in places.items():
        if path == mount or path.startswith(mount + "/"):
            return place / path[len(mount) :].lstrip("/")
    return pod_dir / path.lstrip("/")
