"""Just enough OpenAPI v3 for kubectl: the index and one document per group-version.

kubectl (1.27 and later) reads `/openapi/v3` before `apply` and `create` to learn
whether the server validates fields itself: it looks for a `fieldValidation`
parameter on the PATCH operation tagged with the kind's
`x-kubernetes-group-version-kind`. Declaring it lets kubectl skip client-side
schema validation, which would need the full schemas. No schemas are served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from better_compute.testing.kube.resources import ResourceType, group_versions

__all__ = ["openapi_document", "openapi_index"]

_QUERY = ("fieldValidation", "fieldManager", "force", "dryRun")


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_index(served: Sequence[ResourceType]) -> dict[str, Any]:
    paths = {}
    for group, version in group_versions(served):
        prefix = _prefix(group, version)
        digest = hashlib.sha256(prefix.encode()).hexdigest()[:16].upper()
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest}"}
    return {"paths": paths}


def openapi_document(prefix: str, server_version: str, served: Sequence[ResourceType]) -> dict[str, Any] | None:
    documented = [r for r in served if _prefix(r.group, r.version) == prefix and r.stored]
    if not documented:
        return None
    paths: dict[str, Any] = {}
    for rt in documented:
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        parameters = [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for name in _QUERY
        ]
        paths[f"/{prefix}{scope}/{rt.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "parameters": parameters,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{server_version}"},
        "paths": paths,
        "components": {"schemas": {}},
    }
