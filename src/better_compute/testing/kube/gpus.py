"""A simulated GPU node: its GPUs, its driver, and which GPUs a container on it sees.

The GPUs carry the UUIDs bcd's simulated inventory derives from the Node name, so bcd and
the kubelet agree on them. A node whose driver is not loaded yet has no GPU devices: no
plugin can advertise them and no container sees them. What a container gets depends on
the node's container runtime, as on the providers (docs/providers.md, sources there):

- no NVIDIA container runtime (GKE's Container-Optimized OS): only device nodes give a
  GPU. The container needs `/dev/nvidiaN`, `/dev/nvidiactl` and `/dev/nvidia-uvm` (a
  device plugin's DeviceSpecs, or every host device for a privileged container) and the
  driver's directory (`/home/kubernetes/bin/nvidia`) mounted; environment variables do
  nothing.
- the NVIDIA container runtime as containerd's default (EKS AL2023 and Bottlerocket
  NVIDIA, DOKS): `NVIDIA_VISIBLE_DEVICES` of the container's final environment (the
  plugin's Allocate envs, then the container's own, which win) for a privileged
  container, and for an unprivileged one only where the runtime's config.toml accepts
  it; mounts at `/var/run/nvidia-container-devices/<id>` where it accepts those (they
  come first: the variable is read only when there are none); CDI
  device names (`nvidia.com/gpu=<id>`) where containerd has CDI on. The runtime reads
  its config.toml from the host at each container start, so a change there applies to
  the next container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from better_compute.bcd.inventory import simulated_gpus

__all__ = [
    "COS_DRIVER_DIR",
    "ENVVAR_WHEN_UNPRIVILEGED",
    "RUNTIME_CONFIG",
    "VOLUME_MOUNTS",
    "VOLUME_MOUNT_ROOT",
    "ContainerDevices",
    "GpuRuntime",
    "NodeGpus",
    "read_runtime_config",
    "runtime_config_text",
    "visible_gpus",
]

COS_DRIVER_DIR = "/home/kubernetes/bin/nvidia"
RUNTIME_CONFIG = "etc/nvidia-container-runtime/config.toml"
"""The NVIDIA container runtime's config, relative to the host's root."""
ENVVAR_WHEN_UNPRIVILEGED = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm")


@dataclass(frozen=True)
class GpuRuntime:
    """A node image's container runtime as far as GPUs go; `env_when_unprivileged` and
    `volume_mounts` are the defaults written to the host's config.toml at boot."""

    name: str
    nvidia_toolkit: bool
    env_when_unprivileged: bool = True
    volume_mounts: bool = False
    cdi: bool = False


COS = GpuRuntime("cos", nvidia_toolkit=False)
AL2023_NVIDIA = GpuRuntime("al2023-nvidia", nvidia_toolkit=True, env_when_unprivileged=True, cdi=True)
BOTTLEROCKET_NVIDIA = GpuRuntime(
    "bottlerocket-nvidia", nvidia_toolkit=True, env_when_unprivileged=False, volume_mounts=True
)
DOKS_NVIDIA = GpuRuntime("doks-nvidia", nvidia_toolkit=True, env_when_unprivileged=True)


@dataclass
class NodeGpus:
    """The node's GPUs and whether their driver is loaded (`driver_ready`)."""

    count: int
    model: str
    runtime: GpuRuntime
    driver_ready: bool = True

    def uuids(self, node_name: str) -> list[str]:
        return [gpu.uuid for gpu in simulated_gpus(f"{self.count}x{self.model}", node_name)]


@dataclass(frozen=True)
class ContainerDevices:
    """What the runtime is asked to give one container: device nodes, mounts (host path ->
    container path), CDI device names, its environment, and whether it is privileged."""

    device_nodes: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    privileged: bool = False


def runtime_config_text(runtime: GpuRuntime) -> str:
    """The config.toml a node image ships (only the two settings the simulation reads)."""
    return (
        f"{ENVVAR_WHEN_UNPRIVILEGED} = {str(runtime.env_when_unprivileged).lower()}\n"
        f"{VOLUME_MOUNTS} = {str(runtime.volume_mounts).lower()}\n"
    )


def read_runtime_config(host_root: Path, runtime: GpuRuntime) -> dict[str, bool]:
    """The two settings as the host's config.toml has them now (the runtime's defaults for a missing key)."""
    settings = {ENVVAR_WHEN_UNPRIVILEGED: runtime.env_when_unprivileged, VOLUME_MOUNTS: runtime.volume_mounts}
    try:
        text = (host_root / RUNTIME_CONFIG).read_text()
    except OSError:
        return settings
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in settings:
            settings[key.strip()] = value.strip().lower() == "true"
    return settings


def _named(names: Iterable[str], uuids: list[str]) -> set[str]:
    """The GPUs a list of ids names: `all`, UUIDs or indexes (`none`, `void` and unknown ids name nothing)."""
    chosen: set[str] = set()
    for name in names:
        name = name.strip()
        if name == "all":
            chosen.update(uuids)
        elif name in uuids:
            chosen.add(name)
        elif name.isdigit() and int(name) < len(uuids):
            chosen.add(uuids[int(name)])
    return chosen


def visible_gpus(gpus: NodeGpus, node_name: str, host_root: Path, asked: ContainerDevices) -> tuple[str, ...]:
    """The UUIDs of the GPUs the container sees, in index order (see the module docstring)."""
    uuids = gpus.uuids(node_name)
    if not gpus.driver_ready:
        return ()
    seen: set[str] = set()
    if not gpus.runtime.nvidia_toolkit:
        nodes = {f"/dev/nvidia{i}" for i in range(len(uuids))} | set(_CONTROL_DEVICES)
        reachable = nodes if asked.privileged else nodes & set(asked.device_nodes)
        driver = any(host.rstrip("/") == COS_DRIVER_DIR for host, _ in asked.mounts)
        if driver and all(d in reachable for d in _CONTROL_DEVICES):
            seen = {uuid for i, uuid in enumerate(uuids) if f"/dev/nvidia{i}" in reachable}
    else:
        config = read_runtime_config(host_root, gpus.runtime)
        prefix = VOLUME_MOUNT_ROOT + "/"
        mounted = [path[len(prefix) :] for _, path in asked.mounts if path.startswith(prefix)]
        requested = (asked.env or {}).get("NVIDIA_VISIBLE_DEVICES")
        if config[VOLUME_MOUNTS] and mounted:
            seen |= _named(mounted, uuids)
        elif requested is not None and (asked.privileged or config[ENVVAR_WHEN_UNPRIVILEGED]):
            seen |= _named(requested.split(","), uuids)
        if gpus.runtime.cdi:
            seen |= _named((d.partition("=")[2] for d in asked.cdi_devices if d.startswith("nvidia.com/gpu=")), uuids)
    return tuple(uuid for uuid in uuids if uuid in seen)
