"""The kinds the emulator serves, and how each is addressed.

One table drives routing, discovery, Status bodies (`details.kind` is the plural)
and the generation rule, so that a new kind is one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RESOURCES", "ResourceType", "find_kind", "find_resource", "group_versions"]

_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: `group`/`version`/`plural`, its kind and scope.

    `has_generation` marks kinds whose `metadata.generation` counts changes to
    everything but metadata and status (the real server does this for kinds with
    a spec that controllers observe). `subresources` lists the served
    subresources (`status`, `token`, `eviction`); `verbs` is `("create",)` for
    the reviews, which are answered and never stored.
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    has_generation: bool = False
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = _VERBS

    @property
    def stored(self) -> bool:
        """False for the create-only reviews (TokenReview, SelfSubjectAccessReview...), which are answered, not kept."""
        return self.verbs != ("create",)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"
_AUTHN = "authentication.k8s.io"
_AUTHZ = "authorization.k8s.io"
_CREATE = ("create",)

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "Namespace", "namespaces", "namespace", False, ("ns",), ("status",)),
    ResourceType("", "v1", "Node", "nodes", "node", False, ("no",), ("status",)),
    ResourceType("", "v1", "ConfigMap", "configmaps", "configmap", True, ("cm",)),
    ResourceType("", "v1", "Secret", "secrets", "secret", True),
    ResourceType("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", True, ("sa",), ("token",)),
    ResourceType("", "v1", "Pod", "pods", "pod", True, ("po",), ("status", "eviction", "log"), categories=("all",)),
    ResourceType("", "v1", "Event", "events", "event", True, ("ev",)),
    ResourceType("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", True, ("quota",), ("status",)),
    ResourceType(
        "apps", "v1", "DaemonSet", "daemonsets", "daemonset", True, ("ds",), ("status",), True, categories=("all",)
    ),
    ResourceType(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        True,
        ("pdb",),
        ("status",),
        True,
    ),
    ResourceType("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", False, ("pc",)),
    ResourceType(_AUTHN, "v1", "TokenReview", "tokenreviews", "", False, verbs=_CREATE),
    ResourceType(_AUTHN, "v1", "SelfSubjectReview", "selfsubjectreviews", "", False, verbs=_CREATE),
    ResourceType(_AUTHN, "v1beta1", "SelfSubjectReview", "selfsubjectreviews", "", False, verbs=_CREATE),
    ResourceType(_AUTHZ, "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", "", False, verbs=_CREATE),
    ResourceType(_AUTHZ, "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", "", False, verbs=_CREATE),
    ResourceType(_AUTHZ, "v1", "SubjectAccessReview", "subjectaccessreviews", "", False, verbs=_CREATE),
    ResourceType(_RBAC, "v1", "ClusterRole", "clusterroles", "clusterrole", False),
    ResourceType(_RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", False),
    ResourceType(_RBAC, "v1", "Role", "roles", "role", True),
    ResourceType(_RBAC, "v1", "RoleBinding", "rolebindings", "rolebinding", True),
    ResourceType(
        _ADMISSION,
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        False,
        subresources=("status",),
        has_generation=True,
    ),
    ResourceType(
        _ADMISSION,
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        False,
        has_generation=True,
    ),
)

_BY_PLURAL = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


def find_resource(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PLURAL.get((group, version, plural))


def find_kind(api_version: str, kind: str) -> ResourceType | None:
    return _BY_KIND.get((api_version, kind))


def group_versions() -> list[tuple[str, str]]:
    """Every (group, version) served, core first, in a stable order."""
    seen: list[tuple[str, str]] = []
    for r in RESOURCES:
        if (r.group, r.version) not in seen:
            seen.append((r.group, r.version))
    return seen
