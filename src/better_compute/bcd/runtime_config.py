"""The node's NVIDIA container runtime must not hand GPUs to whoever names them.

With its defaults the runtime gives an unprivileged container every GPU its own
`NVIDIA_VISIBLE_DEVICES` names (CUDA images set `all`), with no device plugin involved:
AL2023's NVIDIA AMI and DOKS ship it so. bcd sets, in the host's config.toml, the two
settings NVIDIA documents for this (NVIDIA k8s-device-plugin README, "Setting other helm
chart values"; Bottlerocket ships them: bottlerocket-os/bottlerocket #3718):

    accept-nvidia-visible-devices-envvar-when-unprivileged = false
    accept-nvidia-visible-devices-as-volume-mounts = true

after which an unprivileged container gets only the devices mounted under
/var/run/nvidia-container-devices, which only Allocate (bcd's) asks for. The runtime reads
the file at each container start. The settings are top-level keys: they are written
before the first [table], replacing any line (commented or not) that set them.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

__all__ = ["SETTINGS", "RuntimeConfigError", "refuse_unprivileged_env"]

log = logging.getLogger(__name__)

SETTINGS = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": "false",
    "accept-nvidia-visible-devices-as-volume-mounts": "true",
}
_KEY = re.compile(r"^\s*#?\s*([A-Za-z0-9_-]+)\s*=")


class RuntimeConfigError(Exception):
    """The runtime's config.toml could not be read or written."""


def _settled(text: str) -> str:
    lines = text.splitlines()
    first_table = next((i for i, line in enumerate(lines) if line.lstrip().startswith("[")), len(lines))
    top = [line for line in lines[:first_table] if (m := _KEY.match(line)) is None or m.group(1) not in SETTINGS]
    wanted = [f"{key} = {value}" for key, value in SETTINGS.items()]
    return "\n".join([*wanted, *top, *lines[first_table:]]) + "\n"


def refuse_unprivileged_env(path: Path) -> bool:
    """Write SETTINGS into the runtime config at `path`; whether it changed. A missing file (a node
    without the NVIDIA runtime, GKE's COS) is left alone."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        log.info("no NVIDIA container runtime config at %s: nothing to configure", path)
        return False
    except OSError as exc:
        raise RuntimeConfigError(f"cannot read {path}: {exc.strerror}") from exc
    settled = _settled(text)
    if settled == text:
        return False
    try:
        path.write_text(settled)
    except OSError as exc:
        raise RuntimeConfigError(f"cannot write {path}: {exc.strerror}") from exc
    log.info("the NVIDIA container runtime at %s now ignores unprivileged containers' NVIDIA_VISIBLE_DEVICES", path)
    return True
