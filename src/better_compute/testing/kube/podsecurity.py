"""Pod Security admission: the Pod Security Standards a namespace's labels enforce on its pods.

A namespace declares its level with `pod-security.kubernetes.io/enforce` (privileged,
baseline, restricted; the cluster's default where it has none) and the standard's version
with `...enforce-version` (default `latest`). A pod that breaks a check of its level is
refused at creation, 403 `pods "<name>" is forbidden: violates PodSecurity "<level>:<version>":
<check> (<detail>), ...`, the checks in the real order. Modelled checks: baseline's host
namespaces, hostPath volumes and privileged containers; restricted adds privilege escalation,
capabilities, volume types, runAsNonRoot and seccomp. Workload objects (a DaemonSet) are
admitted: their pods are refused when their controller creates them (kubernetes.io, Pod
Security Standards and Pod Security Admission).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ENFORCE_LABEL", "ENFORCE_VERSION_LABEL", "LEVELS", "violations"]

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")
_RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
_VOLUME_SOURCE_FIELDS = frozenset({"name"})


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from (c for c in spec.get(key) or [] if isinstance(c, dict))


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _who(noun: str, names: list[str]) -> str:
    """`container "a"` or `containers "a", "b"`, as the checks word it."""
    return f"{noun}{'s' if len(names) > 1 else ''} {_quoted(names)}"


def _context(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext") or {}


def _host_namespaces(spec: dict[str, Any]) -> str | None:
    used = [f"{field}=true" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field) is True]
    return f"host namespaces ({', '.join(used)})" if used else None


def _host_path_volumes(spec: dict[str, Any]) -> str | None:
    names = [v.get("name", "") for v in spec.get("volumes") or [] if "hostPath" in v]
    return f"hostPath volumes ({_who('volume', names)})" if names else None


def _privileged(spec: dict[str, Any]) -> str | None:
    names = [c.get("name", "") for c in _containers(spec) if _context(c).get("privileged") is True]
    if not names:
        return None
    return f"privileged ({_who('container', names)} must not set securityContext.privileged=true)"


def _privilege_escalation(spec: dict[str, Any]) -> str | None:
    names = [c.get("name", "") for c in _containers(spec) if _context(c).get("allowPrivilegeEscalation") is not False]
    if not names:
        return None
    return f"allowPrivilegeEscalation != false ({_who('container', names)} must set securityContext.allowPrivilegeEscalation=false)"


def _capabilities(spec: dict[str, Any]) -> str | None:
    undropped: list[str] = []
    added: list[tuple[str, list[str]]] = []
    for container in _containers(spec):
        caps = _context(container).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            undropped.append(container.get("name", ""))
        extra = [c for c in caps.get("add") or [] if c != "NET_BIND_SERVICE"]
        if extra:
            added.append((container.get("name", ""), extra))
    details = []
    if undropped:
        details.append(f'{_who("container", undropped)} must set securityContext.capabilities.drop=["ALL"]')
    for name, extra in added:
        details.append(f'container "{name}" must not include {_quoted(extra)} in securityContext.capabilities.add')
    return f"unrestricted capabilities ({'; '.join(details)})" if details else None


def _volume_types(spec: dict[str, Any]) -> str | None:
    names: list[str] = []
    types: list[str] = []
    for volume in spec.get("volumes") or []:
        kinds = [k for k in volume if k not in _VOLUME_SOURCE_FIELDS and k not in _RESTRICTED_VOLUMES]
        if kinds:
            names.append(volume.get("name", ""))
            types.extend(k for k in kinds if k not in types)
    if not names:
        return None
    verb = "use" if len(names) > 1 else "uses"
    noun = "types" if len(types) > 1 else "type"
    return f"restricted volume types ({_who('volume', names)} {verb} restricted volume {noun} {_quoted(types)})"


def _pod_or_containers(spec: dict[str, Any], field: str, ok: Callable[[Any], bool]) -> list[str] | None:
    """The containers that must set `field` (None when the pod's own setting covers them all)."""
    if ok((spec.get("securityContext") or {}).get(field)):
        return None
    return [c.get("name", "") for c in _containers(spec) if not ok(_context(c).get(field))]


def _run_as_non_root(spec: dict[str, Any]) -> str | None:
    names = _pod_or_containers(spec, "runAsNonRoot", lambda v: v is True)
    if not names:
        return None
    return f"runAsNonRoot != true (pod or {_who('container', names)} must set securityContext.runAsNonRoot=true)"


def _seccomp(spec: dict[str, Any]) -> str | None:
    names = _pod_or_containers(
        spec, "seccompProfile", lambda v: isinstance(v, dict) and v.get("type") in ("RuntimeDefault", "Localhost")
    )
    if not names:
        return None
    return (
        f"seccompProfile (pod or {_who('container', names)} must set securityContext.seccompProfile.type "
        'to "RuntimeDefault" or "Localhost")'
    )


_BASELINE: tuple[Callable[[dict[str, Any]], str | None], ...] = (_host_namespaces, _host_path_volumes, _privileged)
_RESTRICTED: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    _privilege_escalation,
    _capabilities,
    _volume_types,
    _run_as_non_root,
    _seccomp,
)


def violations(level: str, spec: dict[str, Any]) -> list[str]:
    """What `spec` breaks at `level`, in the order the admission reports it."""
    checks = () if level == "privileged" else _BASELINE + (_RESTRICTED if level == "restricted" else ())
    return [found for check in checks if (found := check(spec)) is not None]
