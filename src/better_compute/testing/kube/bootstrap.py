"""The RBAC objects a new cluster starts with, as the real server's bootstrap policy makes them.

The user-facing roles (`cluster-admin`; `admin`, `edit`, `view` aggregated from
the `system:aggregate-to-*` roles), the discovery and self-review roles every
authenticated user is bound to, and `system:auth-delegator` (TokenReview and
SubjectAccessReview, what a component verifying tokens is bound to). The rules
name the resources the emulator serves, with the verbs the real policy gives.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLUSTER_ROLES", "CLUSTER_ROLE_BINDINGS"]

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _paths(urls: list[str], verbs: list[str] = ["get"]) -> dict[str, Any]:  # noqa: B006 (never mutated)
    return {"nonResourceURLs": urls, "verbs": verbs}


def _role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "rules": rules}


def _aggregated(name: str, into: str | None, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """An aggregated role, with the rules the aggregation controller would give it (so it has nothing to do)."""
    unique = [rule for i, rule in enumerate(rules) if rule not in rules[:i]]
    role = _role(name, unique, {_AGGREGATE + into: "true"} if into else None)
    role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {_AGGREGATE + name: "true"}}]}
    return role


_VIEW = [
    _rule(
        [""],
        [
            "configmaps",
            "pods",
            "pods/log",
            "pods/status",
            "serviceaccounts",
            "events",
            "namespaces",
            "namespaces/status",
        ],
        _READ,
    ),
    _rule(["apps"], ["daemonsets", "daemonsets/status"], _READ),
    _rule(["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"], _READ),
]
_EDIT = [
    _rule([""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets"], _READ),
    _rule([""], ["serviceaccounts"], ["impersonate"]),
    _rule([""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], _WRITE),
    _rule([""], ["pods/eviction"], ["create"]),
    _rule([""], ["configmaps", "events", "secrets", "serviceaccounts"], _WRITE),
    _rule([""], ["serviceaccounts/token"], ["create"]),
    _rule(["apps"], ["daemonsets"], _WRITE),
    _rule(["policy"], ["poddisruptionbudgets"], _WRITE),
]
_ADMIN = [
    _rule(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
    _rule(["rbac.authorization.k8s.io"], ["rolebindings", "roles"], _WRITE + _READ),
]

CLUSTER_ROLES: tuple[dict[str, Any], ...] = (
    _role("cluster-admin", [_rule(["*"], ["*"], ["*"]), _paths(["*"], ["*"])]),
    _aggregated("admin", None, _EDIT + _VIEW + _ADMIN),
    _aggregated("edit", "admin", _EDIT + _VIEW),
    _aggregated("view", "edit", _VIEW),
    _role("system:aggregate-to-admin", _ADMIN, {_AGGREGATE + "admin": "true"}),
    _role("system:aggregate-to-edit", _EDIT, {_AGGREGATE + "edit": "true"}),
    _role("system:aggregate-to-view", _VIEW, {_AGGREGATE + "view": "true"}),
    _role(
        "system:basic-user",
        [
            _rule(["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], ["create"]),
            _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"]),
        ],
    ),
    _role(
        "system:discovery",
        [
            _paths(
                [
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ]
            )
        ],
    ),
    _role("system:public-info-viewer", [_paths(["/healthz", "/livez", "/readyz", "/version", "/version/"])]),
    _role(
        "system:monitoring",
        [_paths(["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"])],
    ),
    _role(
        "system:auth-delegator",
        [
            _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
            _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
        ],
    ),
    _role(
        "system:service-account-issuer-discovery",
        [_paths(["/.well-known/openid-configuration", "/openid/v1/jwks"])],
    ),
)


def _binding(role: str, *groups: str) -> dict[str, Any]:
    return {
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups],
    }


CLUSTER_ROLE_BINDINGS: tuple[dict[str, Any], ...] = (
    _binding("cluster-admin", "system:masters"),
    _binding("system:basic-user", "system:authenticated"),
    _binding("system:discovery", "system:authenticated"),
    _binding("system:public-info-viewer", "system:authenticated", "system:unauthenticated"),
    _binding("system:monitoring", "system:monitoring"),
    _binding("system:service-account-issuer-discovery", "system:serviceaccounts"),
)
