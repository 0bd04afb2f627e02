"""What runs bcd on a substrate's cluster: the operator's part of the DaemonSet.

The pool decides which Nodes bcd runs on and which pool they join; the agent says
what to run there: bcd's image, where its control plane and gateway are, and the
SPKI pins of the gateway's key. The provider's GPU node decides the rest of the
DaemonSet (substrates/manifests.py); an operator whose nodes differ may override
the RuntimeClass (a cluster where the NVIDIA runtime is not the default), add
tolerations (taints of their own), or name another PriorityClass ("" for none).
`kubernetes_substrate_agent(...)` (in `better_compute.providers.kubernetes`) builds
one, checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["SubstrateAgent", "SubstrateConfig", "substrate_agent", "substrate_agent_from_env", "substrate_config"]


@dataclass(frozen=True)
class SubstrateAgent:
    """bcd's image and how it reaches the control plane. `ca_pem` is an optional CA bundle
    that the join container trusts for `control_plane_url` (a private CA)."""

    image: str
    gateway_url: str
    pins: tuple[str, ...]
    control_plane_url: str
    ca_pem: str | None = field(default=None, repr=False)
    resource_name: str = "nvidia.com/gpu"
    runtime_class_name: str | None = None
    """The pod's RuntimeClass; None leaves the node's default runtime."""
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """Tolerations added to those of the provider's GPU taints."""
    priority_class_name: str | None = None
    """None: system-node-critical (bcd is the node's way to its GPUs); "": no PriorityClass."""


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class SubstrateConfig:
    """`kubernetes(substrate=SubstrateConfig(agent=...))`."""

    agent: SubstrateAgent | None = None


def substrate_config(value: SubstrateConfig | Mapping[str, object] | None) -> SubstrateConfig:
    """`substrate=` as given to kubernetes(): a SubstrateConfig or the mapping `{"agent": ...}`
    (DESIGN.md's form), checked here so that a wrong one is refused at construction, not at bind."""
    if value is None:
        return SubstrateConfig()
    if isinstance(value, SubstrateConfig):
        agent: object = value.agent
    elif isinstance(value, Mapping):
        unknown = sorted(str(key) for key in value if key != "agent")
        if unknown:
            raise ComputeError(
                ErrorCode.INVALID_INPUT,
                f"substrate takes only agent, not {', '.join(unknown)}",
                f"/substrate/{unknown[0]}",
            )
        agent = value.get("agent")
    else:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, 'substrate is SubstrateConfig(agent=...) or {"agent": ...}', "/substrate"
        )
    if agent is not None and not isinstance(agent, SubstrateAgent):
        raise ComputeError(
            ErrorCode.INVALID_INPUT, "substrate agent is built by kubernetes_substrate_agent(...)", "/substrate/agent"
        )
    return SubstrateConfig(agent=agent)


def _url(value: str, schemes: tuple[str, ...], path: str) -> str:
    parsed = urlparse(value) if isinstance(value, str) else None
    if parsed is None or parsed.scheme not in schemes or not parsed.netloc:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"{path[1:]} is a {' or '.join(schemes)} URL", path)
    return value.rstrip("/")


def _name(value: str | None, path: str, *, empty: bool = False) -> str | None:
    if value is None or (empty and value == ""):
        return value
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ComputeError(ErrorCode.INVALID_INPUT, f"{path[1:]} is a lowercase DNS name", path)
    return value


def _tolerations(given: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    checked = []
    for index, toleration in enumerate(given):
        path = f"/tolerations/{index}"
        if not isinstance(toleration, Mapping) or set(toleration) - _TOLERATION_KEYS:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, "a toleration has key, operator, value, effect, tolerationSeconds", path
            )
        operator = toleration.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise ComputeError(ErrorCode.INVALID_INPUT, "operator is Equal or Exists", f"{path}/operator")
        if toleration.get("effect", "") not in _EFFECTS:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, "effect is NoSchedule, PreferNoSchedule or NoExecute", f"{path}/effect"
            )
        if operator == "Exists" and toleration.get("value"):
            raise ComputeError(ErrorCode.INVALID_INPUT, "an Exists toleration has no value", f"{path}/value")
        if not toleration.get("key") and operator != "Exists":
            raise ComputeError(ErrorCode.INVALID_INPUT, "a toleration without a key is Exists", f"{path}/key")
        checked.append(dict(toleration))
    return tuple(checked)


def substrate_agent(
    *,
    image: str,
    gateway_url: str,
    pins: tuple[str, ...] | list[str] = (),
    control_plane_url: str,
    ca_pem: str | None = None,
    resource_name: str = "nvidia.com/gpu",
    runtime_class_name: str | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    priority_class_name: str | None = None,
) -> SubstrateAgent:
    """A checked agent: a non-empty image, a wss:// gateway (ws:// only with no pins is refused),
    an http(s) control plane URL, pins of the form `sha256/<base64>`, and the overrides'
    names and tolerations in the form the API server takes."""
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ComputeError(ErrorCode.INVALID_INPUT, "image is a container image reference", "/image")
    gateway = _url(gateway_url, ("wss", "ws"), "/gatewayUrl")
    control_plane = _url(control_plane_url, ("https", "http"), "/controlPlaneUrl")
    checked = tuple(pins)
    for index, pin in enumerate(checked):
        if not isinstance(pin, str) or not pin.startswith("sha256/") or len(pin) < 20:
            raise ComputeError(ErrorCode.INVALID_INPUT, "a pin is sha256/<base64 of the SPKI>", f"/pins/{index}")
    return SubstrateAgent(
        image=image,
        gateway_url=gateway,
        pins=checked,
        control_plane_url=control_plane,
        ca_pem=ca_pem,
        resource_name=resource_name,
        runtime_class_name=_name(runtime_class_name, "/runtimeClassName"),
        tolerations=_tolerations(tolerations),
        priority_class_name=_name(priority_class_name, "/priorityClassName", empty=True),
    )


def substrate_agent_from_env(env: Mapping[str, str]) -> SubstrateAgent | None:
    """The agent the standard control plane runs with, from BC_BCD_IMAGE, BC_GATEWAY_URL,
    BC_GATEWAY_PINS (comma-separated), BC_CONTROL_PLANE_URL (default BC_BASE_URL) and, for a
    private CA, BC_CONTROL_PLANE_CA_FILE. None (the self-check says so) when BC_BCD_IMAGE is unset."""
    image = env.get("BC_BCD_IMAGE", "").strip()
    if not image:
        return None
    ca_file = env.get("BC_CONTROL_PLANE_CA_FILE")
    try:
        ca_pem = Path(ca_file).read_text() if ca_file else None
    except OSError as exc:
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"cannot read BC_CONTROL_PLANE_CA_FILE {ca_file}: {exc.strerror}",
            "/BC_CONTROL_PLANE_CA_FILE",
        ) from exc
    pins = tuple(p.strip() for p in env.get("BC_GATEWAY_PINS", "").split(",") if p.strip())
    return substrate_agent(
        image=image,
        gateway_url=env.get("BC_GATEWAY_URL", ""),
        pins=pins,
        control_plane_url=env.get("BC_CONTROL_PLANE_URL") or env.get("BC_BASE_URL", ""),
        ca_pem=ca_pem,
    )
