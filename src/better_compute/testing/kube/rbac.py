"""The RBAC authorizer: may this user do this verb on this resource or path?

The rules of the real `rbac` authorizer: ClusterRoleBindings grant their
ClusterRole everywhere (and on non-resource URLs); RoleBindings grant a Role of
their namespace, or a ClusterRole, inside that namespace only. A rule matches
when its verbs, apiGroups, resources (`pods/eviction` for a subresource, `*/sub`
and `*` too) and resourceNames allow the request. The answer carries the
reason the real authorizer gives, which SubjectAccessReviews report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from better_compute.testing.kube.auth import TokenReview
from better_compute.testing.kube.resources import find_kind
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import ObjectStore

__all__ = ["Attributes", "Authorizer", "authorize", "forbidden", "rules_for"]

_CLUSTER_ROLE = find_kind("rbac.authorization.k8s.io/v1", "ClusterRole")
_ROLE = find_kind("rbac.authorization.k8s.io/v1", "Role")
_CLUSTER_BINDING = find_kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
_BINDING = find_kind("rbac.authorization.k8s.io/v1", "RoleBinding")


@dataclass(frozen=True)
class Attributes:
    """One request as the authorizer sees it. `path` set means a non-resource request."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return not self.path


Authorizer = Callable[[TokenReview, Attributes], "str | None"]


def _subject_matches(subject: dict[str, Any], user: TokenReview, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    name = subject.get("name", "")
    if kind == "User":
        return bool(user.subject == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(user.subject == f"system:serviceaccount:{namespace}:{name}")
    return False


def _has(values: list[str] | None, wanted: str) -> bool:
    return values is not None and ("*" in values or wanted in values)


def _rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.is_resource:
        urls = rule.get("nonResourceURLs") or []
        return any(u == attrs.path or u == "*" or (u.endswith("*") and attrs.path.startswith(u[:-1])) for u in urls)
    if not _has(rule.get("apiGroups"), attrs.group):
        return False
    resources = rule.get("resources") or []
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if not ("*" in resources or combined in resources or (attrs.subresource and f"*/{attrs.subresource}" in resources)):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _bindings(store: ObjectStore, namespace: str) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each binding that may apply in `namespace` ("" for cluster scope), with its role's rules."""
    assert _CLUSTER_ROLE and _ROLE and _CLUSTER_BINDING and _BINDING
    for binding in store.items(_CLUSTER_BINDING):
        ref = binding.get("roleRef") or {}
        role = store.peek(_CLUSTER_ROLE, "", ref.get("name", "")) if ref.get("kind") == "ClusterRole" else None
        yield binding, (role or {}).get("rules") or []
    if not namespace:
        return
    for binding in store.items(_BINDING, namespace):
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            role = store.peek(_CLUSTER_ROLE, "", ref.get("name", ""))
        elif ref.get("kind") == "Role":
            role = store.peek(_ROLE, namespace, ref.get("name", ""))
        else:
            role = None
        yield binding, (role or {}).get("rules") or []


def _applies(binding: dict[str, Any], user: TokenReview) -> dict[str, Any] | None:
    namespace = binding["metadata"].get("namespace", "")
    return next((s for s in binding.get("subjects") or [] if _subject_matches(s, user, namespace)), None)


def authorize(store: ObjectStore, user: TokenReview, attrs: Attributes) -> str | None:
    """The reason the request is allowed, or None when RBAC denies it."""
    namespace = attrs.namespace if attrs.is_resource else ""
    for binding, rules in _bindings(store, namespace):
        subject = _applies(binding, user)
        if subject is None or not any(_rule_allows(rule, attrs) for rule in rules):
            continue
        ref = binding["roleRef"]
        meta = binding["metadata"]
        kind = "RoleBinding" if "namespace" in meta else "ClusterRoleBinding"
        where = f"{meta['name']}/{meta['namespace']}" if "namespace" in meta else meta["name"]
        name = subject["name"]
        if subject["kind"] == "ServiceAccount":
            name = f"{name}/{subject.get('namespace') or meta.get('namespace', '')}"
        return f'RBAC: allowed by {kind} "{where}" of {ref["kind"]} "{ref["name"]}" to {subject["kind"]} "{name}"'
    return None


def rules_for(store: ObjectStore, user: TokenReview, namespace: str) -> list[dict[str, Any]]:
    """Every rule granted to `user` in `namespace` (what SelfSubjectRulesReview lists)."""
    granted: list[dict[str, Any]] = []
    for binding, rules in _bindings(store, namespace):
        if _applies(binding, user) is not None:
            granted.extend(rule for rule in rules if rule not in granted)
    return granted


def forbidden(user: TokenReview, attrs: Attributes) -> KubeError:
    """The 403 the real server answers, word for word."""
    who = f'User "{user.subject}"'
    if not attrs.is_resource:
        return KubeError(403, "Forbidden", f'forbidden: {who} cannot {attrs.verb} path "{attrs.path}"', {})
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    target = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    message = (
        f'{target} is forbidden: {who} cannot {attrs.verb} resource "{combined}" in API group "{attrs.group}" {scope}'
    )
    details: dict[str, Any] = {"name": attrs.name} if attrs.name else {}
    if attrs.group:
        details["group"] = attrs.group
    details["kind"] = attrs.resource
    return KubeError(403, "Forbidden", message, details)
