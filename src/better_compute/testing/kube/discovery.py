"""Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/<group>[/<version>]`.

kubectl builds its REST mapping from these (kind to plural, namespaced or not,
short names such as `no` and `ds`), so they list exactly what the cluster serves
(`served`: its version's kinds, resources.py).
Clients asking for aggregated discovery get these legacy documents with a plain
`application/json` content type, which every kubectl from 1.27 on accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from better_compute.testing.kube.resources import ResourceType, group_versions

__all__ = ["api_group", "api_group_list", "api_resource_list", "api_versions", "version_info"]


def version_info(version: str) -> dict[str, str]:
    major, minor, *_ = version.split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{version}",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group(group: str, served: Sequence[ResourceType]) -> dict[str, Any] | None:
    versions = [v for g, v in group_versions(served) if g == group]
    if not group or not versions:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(served: Sequence[ResourceType]) -> dict[str, Any]:
    groups = [api_group(g, served) for g, _ in group_versions(served) if g]
    unique = {g["name"]: g for g in groups if g is not None}
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(unique.values())}


def _entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _subresource(rt: ResourceType, sub: str) -> dict[str, Any]:
    if sub == "eviction":
        return {
            "name": f"{rt.plural}/eviction",
            "singularName": "",
            "namespaced": rt.namespaced,
            "group": "policy",
            "version": "v1",
            "kind": "Eviction",
            "verbs": ["create"],
        }
    if sub == "token":
        return {
            "name": f"{rt.plural}/token",
            "singularName": "",
            "namespaced": rt.namespaced,
            "group": "authentication.k8s.io",
            "version": "v1",
            "kind": "TokenRequest",
            "verbs": ["create"],
        }
    return {
        "name": f"{rt.plural}/{sub}",
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": ["get"] if sub == "log" else ["get", "patch", "update"],
    }


def api_resource_list(group: str, version: str, served: Sequence[ResourceType]) -> dict[str, Any] | None:
    listed = [r for r in served if r.group == group and r.version == version]
    if not listed:
        return None
    resources: list[dict[str, Any]] = []
    for rt in listed:
        resources.append(_entry(rt))
        resources.extend(_subresource(rt, sub) for sub in rt.subresources)
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}
