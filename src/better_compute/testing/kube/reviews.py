"""The create-only review kinds: answered from the request, never stored.

- TokenReview: who a token is (what a component verifying a pod's projected
  token asks), with the audiences it is valid for;
- SelfSubjectReview (`kubectl auth whoami`): who the caller is;
- SelfSubjectAccessReview (`kubectl auth can-i`), SubjectAccessReview and
  SelfSubjectRulesReview (`kubectl auth can-i --list`): RBAC's answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.auth import TokenReview
from better_compute.testing.kube.rbac import Attributes, rules_for
from better_compute.testing.kube.resources import ResourceType
from better_compute.testing.kube.status import KubeError

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["answer_review"]


def _user_info(user: TokenReview) -> dict[str, Any]:
    info: dict[str, Any] = {"username": user.subject, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = {key: list(values) for key, values in user.extra.items()}
    return info


def _token_review(cluster: KubeCluster, user: TokenReview, spec: dict[str, Any]) -> dict[str, Any]:
    token = spec.get("token")
    if not token:
        raise KubeError(422, "Invalid", 'TokenReview.authentication.k8s.io "" is invalid: spec.token: Required value')
    found = cluster.review_token(str(token), list(spec.get("audiences") or []))
    if found is None:
        return {"user": {}, "error": "[invalid bearer token, service account token has been invalidated]"}
    reviewed, audiences = found
    return {"authenticated": True, "user": _user_info(reviewed), "audiences": audiences}


def _attributes(spec: dict[str, Any]) -> Attributes:
    resource = spec.get("resourceAttributes")
    if resource is not None:
        return Attributes(
            verb=resource.get("verb", ""),
            group=resource.get("group", ""),
            resource=resource.get("resource", ""),
            subresource=resource.get("subresource", ""),
            namespace=resource.get("namespace", ""),
            name=resource.get("name", ""),
        )
    other = spec.get("nonResourceAttributes")
    if other is None:
        raise KubeError(
            422,
            "Invalid",
            'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
            'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
        )
    return Attributes(verb=other.get("verb", ""), path=other.get("path", ""))


def _access(cluster: KubeCluster, subject: TokenReview, spec: dict[str, Any]) -> dict[str, Any]:
    reason = cluster.authorize(subject, _attributes(spec))
    return {"allowed": True, "reason": reason} if reason is not None else {"allowed": False}


def _self_access(cluster: KubeCluster, user: TokenReview, spec: dict[str, Any]) -> dict[str, Any]:
    return _access(cluster, user, spec)


def _subject_access(cluster: KubeCluster, user: TokenReview, spec: dict[str, Any]) -> dict[str, Any]:
    groups = tuple(spec.get("groups") or ())
    extra = {k: tuple(v) for k, v in (spec.get("extra") or {}).items()}
    return _access(cluster, TokenReview(spec.get("user", ""), groups, uid=spec.get("uid", ""), extra=extra), spec)


def _self_rules(cluster: KubeCluster, user: TokenReview, spec: dict[str, Any]) -> dict[str, Any]:
    rules = rules_for(cluster.store, user, spec.get("namespace", ""))
    resource = [r for r in rules if "nonResourceURLs" not in r]
    other = [r for r in rules if "nonResourceURLs" in r]
    return {"resourceRules": resource, "nonResourceRules": other, "incomplete": False}


def _self_subject(cluster: KubeCluster, user: TokenReview, spec: dict[str, Any]) -> dict[str, Any]:
    return {"userInfo": _user_info(user)}


_ANSWERS: dict[str, Callable[[KubeCluster, TokenReview, dict[str, Any]], dict[str, Any]]] = {
    "TokenReview": _token_review,
    "SelfSubjectReview": _self_subject,
    "SelfSubjectAccessReview": _self_access,
    "SubjectAccessReview": _subject_access,
    "SelfSubjectRulesReview": _self_rules,
}


def answer_review(cluster: KubeCluster, rt: ResourceType, user: TokenReview, body: Any) -> dict[str, Any]:
    """The review `body` with its `status` filled in, as the real server answers a create."""
    body = body if isinstance(body, dict) else {}
    spec = body.get("spec") or {}
    answer: dict[str, Any] = {
        "kind": rt.kind,
        "apiVersion": rt.api_version,
        "metadata": {"creationTimestamp": None, **(body.get("metadata") or {})},
    }
    if rt.kind != "SelfSubjectReview":
        answer["spec"] = spec
    answer["status"] = _ANSWERS[rt.kind](cluster, user, spec)
    return answer
