"""The API server's validation of a pod's spec that the emulator models: each container's mount paths.

Two volumeMounts of one container at the same `mountPath` are refused when the pod is created
(422, `spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/p": must be unique`), so a
DaemonSet whose template mounts a path twice never gets a pod (its controller's creates are refused).
"""

from __future__ import annotations

from typing import Any

__all__ = ["pod_spec_errors"]


def pod_spec_errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The (field, message) causes a Pod with this spec is refused for; empty when it is valid."""
    causes: list[tuple[str, str]] = []
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            seen: set[str] = set()
            for j, mount in enumerate(container.get("volumeMounts") or []):
                path = str(mount.get("mountPath", ""))
                if path in seen:
                    causes.append(
                        (f"spec.{group}[{i}].volumeMounts[{j}].mountPath", f'Invalid value: "{path}": must be unique')
                    )
                seen.add(path)
    return causes
