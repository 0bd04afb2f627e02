"""Turn a request path into what it addresses.

`/api/v1/namespaces/<ns>/<plural>/<name>/<subresource>` and the cluster-scoped
and group (`/apis/<group>/<version>/...`) forms. The namespaces resource itself
(`/api/v1/namespaces/<name>`) is told apart from a namespaced path by whether
the segment after the namespace name is a namespaced resource.
"""

from __future__ import annotations

from dataclasses import dataclass

from better_compute.testing.kube.resources import ResourceType, find_resource
from better_compute.testing.kube.status import KubeError

__all__ = ["Target", "parse_resource_path"]


@dataclass(frozen=True)
class Target:
    resource: ResourceType
    namespace: str | None  # None: every namespace (or a cluster-scoped kind)
    name: str | None
    subresource: str


def parse_resource_path(segments: list[str]) -> Target | None:
    """The resource a path names, or None when it is not a resource path."""
    if segments[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    if not rest:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        inner = find_resource(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    resource = find_resource(group, version, rest[0])
    if resource is None or len(rest) > 3:
        raise KubeError.path_not_found()
    if resource.namespaced and namespace is None and len(rest) > 1:
        raise KubeError.path_not_found()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and subresource not in resource.subresources:
        raise KubeError.path_not_found()
    return Target(resource, namespace, name, subresource)
