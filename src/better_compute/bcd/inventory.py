"""What the node is: its GPUs (NVML, or a simulated backend) and its OS.

`BCD_SIMULATED_GPUS=8xH100` gives eight simulated H100s whose UUIDs derive from the
hostname, so a restarted bcd reports the same devices; the kubelet simulator and the
demo use it. Without it, NVML (nvidia-ml-py, imported only when present) reads the real
GPUs. A node without nvidia-ml-py reports no GPUs and says why in the log.

`await_inventory` is what `bcd join` reads: on a GPU node whose driver is not loaded yet
(GKE installs it after the node starts), NVML does not start; bcd then waits for the
devices, saying so every `DRIVER_WAIT_SECONDS`, instead of joining with no GPUs.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import socket
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from better_compute.core.clock import Clock
from better_compute.wire.protocol import GpuInfo, Inventory, OsInfo

__all__ = [
    "DRIVER_WAIT_SECONDS",
    "GpuReader",
    "InventoryError",
    "NvmlNotInstalledError",
    "await_inventory",
    "read_gpus",
    "read_inventory",
    "read_os",
    "simulated_gpus",
]

DRIVER_WAIT_SECONDS = 10.0
GpuReader = Callable[[], tuple[list[GpuInfo], str | None]]
"""Reads the GPUs and the driver version; raises InventoryError while NVML cannot start."""

log = logging.getLogger(__name__)

_SIMULATED = re.compile(r"^(\d{1,3})x([A-Za-z0-9][A-Za-z0-9._-]{0,63})$")
_SIM_NAMESPACE = uuid.UUID("6f1d0c52-3a8e-4f7e-9a51-2f4b8d0c7e11")
_SIM_MEMORY_MIB = {"H100": 81559, "H200": 143771, "A100": 81920, "L4": 23034, "B200": 183359}


class InventoryError(Exception):
    """The inventory cannot be read as configured (for example a malformed BCD_SIMULATED_GPUS)."""


class NvmlNotInstalledError(InventoryError):
    """bcd's image has no nvidia-ml-py: no wait will change that."""


def simulated_gpus(spec: str, hostname: str) -> list[GpuInfo]:
    """`8xH100` -> eight GPUs named H100 with UUIDs stable for this hostname."""
    match = _SIMULATED.match(spec.strip())
    if not match:
        raise InventoryError(f"BCD_SIMULATED_GPUS={spec!r} is not of the form <count>x<model>, for example 8xH100")
    count, model = int(match.group(1)), match.group(2)
    return [
        GpuInfo(
            index=i,
            uuid=f"GPU-{uuid.uuid5(_SIM_NAMESPACE, f'{hostname}/{i}')}",
            model=model,
            memory_mib=_SIM_MEMORY_MIB.get(model.upper()),
        )
        for i in range(count)
    ]


def _nvml() -> Any | None:
    """The pynvml module of nvidia-ml-py, or None where it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def nvml_gpus() -> tuple[list[GpuInfo], str | None]:
    """The GPUs NVML sees and the driver version; raises InventoryError when NVML cannot start."""
    nvml = _nvml()
    if nvml is None:
        raise NvmlNotInstalledError("nvidia-ml-py is not installed (pip install 'better-compute[nvml]')")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise InventoryError(f"NVML did not start: {exc}") from exc
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    model=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_mib=int(memory.total) // (1024 * 1024),
                )
            )
        return gpus, driver
    except nvml.NVMLError as exc:
        raise InventoryError(f"NVML failed while reading the GPUs: {exc}") from exc
    finally:
        nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def read_gpus(env: Mapping[str, str], hostname: str) -> tuple[list[GpuInfo], str | None]:
    """Simulated GPUs when BCD_SIMULATED_GPUS is set, NVML's otherwise, none if NVML is absent."""
    spec = env.get("BCD_SIMULATED_GPUS")
    if spec:
        return simulated_gpus(spec, hostname), None
    try:
        return nvml_gpus()
    except InventoryError as exc:
        log.warning("reporting no GPUs: %s", exc)
        return [], None


def _gpu_reader(env: Mapping[str, str], hostname: str) -> GpuReader:
    spec = env.get("BCD_SIMULATED_GPUS")
    if spec:
        gpus = simulated_gpus(spec, hostname)
        return lambda: (gpus, None)
    return nvml_gpus


def _distribution(os_release: Path) -> str:
    try:
        text = os_release.read_text()
    except OSError:
        return platform.system()
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def read_os(env: Mapping[str, str], *, driver_version: str | None = None) -> OsInfo:
    """The OS section: hostname, the Node name from NODE_NAME (downward API), kernel, distribution."""
    return OsInfo(
        hostname=env.get("BCD_HOSTNAME") or socket.gethostname(),
        kubernetes_node_name=env.get("NODE_NAME") or None,
        kernel=platform.release(),
        distribution=_distribution(Path(env.get("BCD_OS_RELEASE", "/etc/os-release"))),
        arch=platform.machine(),
        driver_version=driver_version,
    )


async def await_inventory(env: Mapping[str, str], clock: Clock, gpus: GpuReader | None = None) -> Inventory:
    """The inventory once NVML starts (see the module docstring); `gpus` replaces NVML (a simulated node).

    Without nvidia-ml-py there is nothing to wait for: the node reports no GPUs, as `read_inventory` does.
    """
    os_info = read_os(env)
    reader = gpus or _gpu_reader(env, os_info.hostname)
    while True:
        try:
            found, driver = reader()
            break
        except NvmlNotInstalledError as exc:
            log.warning("reporting no GPUs: %s", exc)
            found, driver = [], None
            break
        except InventoryError as exc:
            log.warning(
                "waiting for the GPU driver: %s; no GPUs are reported until it is loaded (trying again in %.0f s)",
                exc,
                DRIVER_WAIT_SECONDS,
            )
            await clock.sleep(DRIVER_WAIT_SECONDS)
    if driver is not None:
        os_info = os_info.model_copy(update={"driver_version": driver})
    return Inventory(os=os_info, gpus=found)


def read_inventory(env: Mapping[str, str] | None = None) -> Inventory:
    """The node's inventory as bcd reports it at join and on every connection."""
    env = os.environ if env is None else env
    os_info = read_os(env)
    gpus, driver = read_gpus(env, os_info.hostname)
    if driver is not None:
        os_info = os_info.model_copy(update={"driver_version": driver})
    return Inventory(os=os_info, gpus=gpus)
