"""bcd's settings: every one comes from an environment variable, and the CLI flags override them.

The substrate's DaemonSet sets them from its ConfigMap (gateway URL, control plane URL,
pins), the downward API (NODE_NAME) and its volumes (token file, state directory,
kubelet socket). docs/bcd.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_IDENTITY_TOKEN_FILE",
    "DEFAULT_KUBELET_SOCKET",
    "DEFAULT_STATE_DIR",
    "DEFAULT_TOKEN_FILE",
    "BcdConfig",
]

DEFAULT_TOKEN_FILE = "/var/run/bcd/join/token"
DEFAULT_IDENTITY_TOKEN_FILE = "/var/run/bcd/identity/token"
DEFAULT_STATE_DIR = "/var/lib/bcd"
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"


def _pins(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.replace("\n", ",").split(",") if p.strip())


@dataclass(frozen=True)
class BcdConfig:
    control_plane_url: str = ""
    gateway_url: str = ""
    pins: tuple[str, ...] = ()
    token_file: Path = Path(DEFAULT_TOKEN_FILE)
    identity_token_file: Path = Path(DEFAULT_IDENTITY_TOKEN_FILE)
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    kubelet_socket: Path = Path(DEFAULT_KUBELET_SOCKET)
    resource_name: str = "nvidia.com/gpu"
    ca_file: Path | None = None
    runtime_config: Path | None = None
    """The host's NVIDIA container runtime config.toml as mounted (BCD_NVIDIA_RUNTIME_CONFIG): bcd turns off
    the runtime's reading of unprivileged containers' NVIDIA_VISIBLE_DEVICES there (bcd/runtime_config.py)."""
    host_driver_dir: str | None = None
    """The host directory of the NVIDIA driver and its libraries (BCD_HOST_DRIVER_DIR; GKE:
    /home/kubernetes/bin/nvidia) where the node has no NVIDIA container runtime: Allocate mounts it."""
    health_seconds: float = 5.0
    """How often the GPU health watch reads NVML (bcd/health.py), on bcd's clock."""
    health_clean_seconds: float = 600.0
    """How long a GPU whose fault cleared by itself must read healthy before it is healthy again (bcd/recheck.py)."""
    insecure: bool = False
    insecure_join: bool = False
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BcdConfig:
        ca = env.get("BCD_CA_FILE")
        return cls(
            control_plane_url=env.get("BCD_CONTROL_PLANE_URL", "").rstrip("/"),
            gateway_url=env.get("BCD_GATEWAY_URL", ""),
            pins=_pins(env.get("BCD_PINS", "")),
            token_file=Path(env.get("BCD_JOIN_TOKEN_FILE", DEFAULT_TOKEN_FILE)),
            identity_token_file=Path(env.get("BCD_IDENTITY_TOKEN_FILE", DEFAULT_IDENTITY_TOKEN_FILE)),
            state_dir=Path(env.get("BCD_STATE_DIR", DEFAULT_STATE_DIR)),
            kubelet_socket=Path(env.get("BCD_KUBELET_SOCKET", DEFAULT_KUBELET_SOCKET)),
            resource_name=env.get("BCD_RESOURCE_NAME", "nvidia.com/gpu"),
            ca_file=Path(ca) if ca else None,
            runtime_config=Path(env["BCD_NVIDIA_RUNTIME_CONFIG"]) if env.get("BCD_NVIDIA_RUNTIME_CONFIG") else None,
            host_driver_dir=env.get("BCD_HOST_DRIVER_DIR") or None,
            insecure=env.get("BCD_INSECURE_GATEWAY", "") in ("1", "true"),
            insecure_join=env.get("BCD_INSECURE_JOIN", "") in ("1", "true"),
            env=dict(env),
        )

    def override(self, **changes: Any) -> BcdConfig:
        """A copy with the given settings replaced; None means 'not given' and keeps the current one."""
        given = {k: v for k, v in changes.items() if v is not None}
        if "pins" in given:
            given["pins"] = _pins(",".join(given["pins"]))
        if "control_plane_url" in given:
            given["control_plane_url"] = given["control_plane_url"].rstrip("/")
        return replace(self, **given)
