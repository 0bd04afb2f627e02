"""The kinds the emulator serves, and how each is addressed.

One table drives routing, discovery, Status bodies (`details.kind` is the plural)
and the generation rule, so that a new kind is one line here.

Which of them a cluster serves follows its Kubernetes version, as the real API server's
defaults do (`served_by`): ValidatingAdmissionPolicy is served as admissionregistration.k8s.io/v1
from 1.30, when it went GA; from 1.28 to 1.29 it was beta, admissionregistration.k8s.io/v1beta1,
and a beta API introduced after 1.24 is off unless the cluster turns it on (kube-apiserver's
`--runtime-config`, GKE's `enableK8sBetaApis`) (kubernetes.io, "Validating Admission Policy":
"Kubernetes v1.30 [stable]", and on 1.28-1.29 "Ensure that the admissionregistration.k8s.io/v1beta1
API is enabled"; cloud.google.com, "Use Kubernetes beta APIs with GKE clusters"). `OTHER_VERSIONS`
holds such other versions of a stored kind: the same objects (one `key`), shown at the version asked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["OTHER_VERSIONS", "RESOURCES", "ResourceType", "find_kind", "find_resource", "group_versions", "served_by"]

_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: `group`/`version`/`plural`, its kind and scope.

    `has_generation` marks kinds whose `metadata.generation` counts changes to
    everything but metadata and status (the real server does this for kinds with
    a spec that controllers observe). `subresources` lists the served
    subresources (`status`, `token`, `eviction`); `verbs` is `("create",)` for
    the reviews, which are answered and never stored. `served_from` is the first
    Kubernetes minor that serves it; `opt_in` marks a beta API served only where the
    cluster turns it on (by `group/version/plural`).
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
    served_from: tuple[int, int] = (1, 0)
    opt_in: bool = False

    @property
    def gvr(self) -> str:
        """`group/version/plural`, as `--runtime-config` and GKE's `enableK8sBetaApis` name an API."""
        return f"{self.group}/{self.version}/{self.plural}"

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
        served_from=(1, 30),
    ),
    ResourceType(
        _ADMISSION,
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        False,
        has_generation=True,
        served_from=(1, 30),
    ),
)

OTHER_VERSIONS: tuple[ResourceType, ...] = (
    ResourceType(
        _ADMISSION,
        "v1beta1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        False,
        subresources=("status",),
        has_generation=True,
        served_from=(1, 28),
        opt_in=True,
    ),
    ResourceType(
        _ADMISSION,
        "v1beta1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        False,
        has_generation=True,
        served_from=(1, 28),
        opt_in=True,
    ),
)
"""Other versions of kinds in `RESOURCES`, stored with them: never iterated as kinds of their own."""

_EVERY = (*RESOURCES, *OTHER_VERSIONS)
_BY_PLURAL = {(r.group, r.version, r.plural): r for r in _EVERY}
_BY_KIND = {(r.api_version, r.kind): r for r in _EVERY}


def served_by(version: str, enabled: Iterable[str] = ()) -> tuple[ResourceType, ...]:
    """What a cluster of Kubernetes `version` serves, with the opt-in APIs `enabled` turned on."""
    minor = _minor(version)
    on = set(enabled)
    return tuple(r for r in _EVERY if minor >= r.served_from and (not r.opt_in or r.gvr in on))


def _minor(version: str) -> tuple[int, int]:
    found = re.match(r"v?(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a Kubernetes version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def find_resource(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PLURAL.get((group, version, plural))


def find_kind(api_version: str, kind: str) -> ResourceType | None:
    return _BY_KIND.get((api_version, kind))


def group_versions(served: Iterable[ResourceType] = RESOURCES) -> list[tuple[str, str]]:
    """Every (group, version) of `served`, core first, in a stable order."""
    seen: list[tuple[str, str]] = []
    for r in served:
        if (r.group, r.version) not in seen:
            seen.append((r.group, r.version))
    return seen
