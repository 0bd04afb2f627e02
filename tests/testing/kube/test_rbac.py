"""RBAC on every request: bindings, roles, aggregation, groups, non-resource URLs, and the access reviews."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx2
import lightkube
import pytest
from lightkube.models.authorization_v1 import (
    NonResourceAttributes,
    ResourceAttributes,
    SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReviewSpec,
)
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.models.rbac_v1 import AggregationRule, PolicyRule, RoleRef, Subject
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.authentication_v1 import SelfSubjectReview
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview, SelfSubjectRulesReview
from lightkube.resources.core_v1 import ConfigMap, Node, Pod, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding, Role, RoleBinding

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeCluster
from better_compute.testing.kube.tokens import mint_account_token

RBAC = "rbac.authorization.k8s.io"


@asynccontextmanager
async def _http(cluster: KubeCluster, token: str) -> AsyncIterator[httpx2.AsyncClient]:
    context = ssl.create_default_context(cadata=base64.b64decode(cluster.ca_data).decode())
    async with httpx2.AsyncClient(verify=context, headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        yield http


@pytest.fixture
async def robot_token(client: lightkube.AsyncClient, cluster: KubeCluster) -> str:
    """The token of ServiceAccount default/robot, which starts with no binding."""
    await client.create(ServiceAccount(metadata=ObjectMeta(name="robot", namespace="default")))
    return str(mint_account_token(cluster, "default", "robot", 3600)["status"]["token"])


@pytest.fixture
async def account(cluster: KubeCluster, clock: SimClock, robot_token: str) -> AsyncIterator[lightkube.AsyncClient]:
    api = kube_client(ClusterCredentials(cluster.endpoint, cluster.ca_data, robot_token, clock.now()), timeout=10)
    try:
        yield api
    finally:
        await api.close()


async def _refused(call: Callable[[], object]) -> lightkube.ApiError:
    with pytest.raises(lightkube.ApiError) as caught:
        result = call()
        if hasattr(result, "__aiter__"):
            [_ async for _ in result]  # type: ignore[attr-defined]
        else:
            await result  # type: ignore[misc]
    return caught.value


async def test_a_token_without_a_binding_is_refused_with_the_real_message(account: lightkube.AsyncClient) -> None:
    refused = await _refused(lambda: account.list(Pod, namespace="default"))
    status = refused.status
    assert (status.code, status.reason) == (403, "Forbidden")
    assert status.message == (
        'pods is forbidden: User "system:serviceaccount:default:robot" cannot list resource "pods" '
        'in API group "" in the namespace "default"'
    )
    named = (await _refused(lambda: account.get(Node, "n1"))).status
    assert named.message == (
        'nodes "n1" is forbidden: User "system:serviceaccount:default:robot" cannot get resource "nodes" '
        'in API group "" at the cluster scope'
    )
    assert (named.details.name, named.details.kind) == ("n1", "nodes")
    grouped = (await _refused(lambda: account.list(DaemonSet, namespace=lightkube.ALL_NS))).status
    assert grouped.message == (
        'daemonsets.apps is forbidden: User "system:serviceaccount:default:robot" cannot list resource '
        '"daemonsets" in API group "apps" at the cluster scope'
    )


@dataclass(frozen=True)
class Grant:
    role: str  # "Role" | "ClusterRole"
    binding: str  # "RoleBinding" | "ClusterRoleBinding"
    subject: str  # "User" | "Group" | "ServiceAccount"
    rule: PolicyRule


CONFIGMAPS = PolicyRule(apiGroups=[""], resources=["configmaps"], verbs=["get", "list"])
NAMED = PolicyRule(apiGroups=[""], resources=["configmaps"], verbs=["get"], resourceNames=["allowed"])
WILDCARD = PolicyRule(apiGroups=["*"], resources=["*"], verbs=["list"])
EVICT = PolicyRule(apiGroups=[""], resources=["pods/eviction"], verbs=["create"])

# (grant, request, allowed): a request is (verb, resource, namespace, name)
MATRIX = [
    (Grant("Role", "RoleBinding", "ServiceAccount", CONFIGMAPS), ("GET", "namespaces/default/configmaps"), True),
    (Grant("Role", "RoleBinding", "ServiceAccount", CONFIGMAPS), ("GET", "namespaces/kube-system/configmaps"), False),
    (Grant("Role", "RoleBinding", "ServiceAccount", CONFIGMAPS), ("GET", "configmaps"), False),
    (Grant("Role", "RoleBinding", "ServiceAccount", CONFIGMAPS), ("DELETE", "namespaces/default/configmaps/x"), False),
    (Grant("Role", "RoleBinding", "ServiceAccount", CONFIGMAPS), ("GET", "namespaces/default/secrets"), False),
    (Grant("ClusterRole", "RoleBinding", "Group", CONFIGMAPS), ("GET", "namespaces/default/configmaps"), True),
    (Grant("ClusterRole", "RoleBinding", "Group", CONFIGMAPS), ("GET", "namespaces/kube-system/configmaps"), False),
    (
        Grant("ClusterRole", "ClusterRoleBinding", "User", CONFIGMAPS),
        ("GET", "namespaces/kube-system/configmaps"),
        True,
    ),
    (Grant("ClusterRole", "ClusterRoleBinding", "User", CONFIGMAPS), ("GET", "configmaps"), True),
    (
        Grant("ClusterRole", "ClusterRoleBinding", "Group", CONFIGMAPS),
        ("GET", "namespaces/kube-system/configmaps/x"),
        True,
    ),
    (Grant("Role", "RoleBinding", "User", NAMED), ("GET", "namespaces/default/configmaps/allowed"), True),
    (Grant("Role", "RoleBinding", "User", NAMED), ("GET", "namespaces/default/configmaps/x"), False),
    (Grant("ClusterRole", "ClusterRoleBinding", "ServiceAccount", WILDCARD), ("GET", "/apis/apps/v1/daemonsets"), True),
    (Grant("ClusterRole", "ClusterRoleBinding", "ServiceAccount", WILDCARD), ("GET", "nodes/n"), False),
    (Grant("Role", "RoleBinding", "ServiceAccount", EVICT), ("POST", "namespaces/default/pods/p/eviction"), True),
    (Grant("Role", "RoleBinding", "ServiceAccount", EVICT), ("DELETE", "namespaces/default/pods/p"), False),
]


async def _grant(client: lightkube.AsyncClient, grant: Grant) -> None:
    name = "granted"
    if grant.role == "Role":
        await client.create(Role(metadata=ObjectMeta(name=name, namespace="default"), rules=[grant.rule]))
    else:
        await client.create(ClusterRole(metadata=ObjectMeta(name=name), rules=[grant.rule]))
    subject = {
        "User": Subject(kind="User", name="system:serviceaccount:default:robot"),
        "Group": Subject(kind="Group", name="system:serviceaccounts:default"),
        "ServiceAccount": Subject(kind="ServiceAccount", name="robot", namespace="default"),
    }[grant.subject]
    ref = RoleRef(apiGroup=RBAC, kind=grant.role, name=name)
    if grant.binding == "RoleBinding":
        await client.create(
            RoleBinding(metadata=ObjectMeta(name=name, namespace="default"), roleRef=ref, subjects=[subject])
        )
    else:
        await client.create(ClusterRoleBinding(metadata=ObjectMeta(name=name), roleRef=ref, subjects=[subject]))


@pytest.mark.parametrize(("grant", "request_", "allowed"), MATRIX)
async def test_rbac_matrix(
    client: lightkube.AsyncClient,
    cluster: KubeCluster,
    robot_token: str,
    grant: Grant,
    request_: tuple[str, str],
    allowed: bool,
) -> None:
    """Each binding kind and role kind, allowed and denied: a denial is a 403, an allowed request succeeds."""
    for namespace in ("default", "kube-system"):
        for name in ("allowed", "x"):
            await client.create(ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace)))
    await cluster.kubelet.add_node("n")
    await client.create(
        Pod(
            metadata=ObjectMeta(name="p", namespace="default"),
            spec=PodSpec(containers=[Container(name="c", image="i")]),
        )
    )
    await _grant(client, grant)
    method, path = request_
    url = path if path.startswith("/") else f"/api/v1/{path}"
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}} if method == "POST" else None
    async with _http(cluster, robot_token) as http:
        response = await http.request(method, cluster.endpoint + url, json=body)
    if allowed:
        assert response.status_code in (200, 201), response.text
    else:
        assert response.status_code == 403, response.text


async def test_aggregation_grows_the_view_role(client: lightkube.AsyncClient, account: lightkube.AsyncClient) -> None:
    view = await client.get(ClusterRole, "view")
    assert view.aggregationRule is not None
    assert any("pods" in (rule.resources or []) for rule in view.rules or [])
    await client.create(
        RoleBinding(
            metadata=ObjectMeta(name="robot-view", namespace="default"),
            roleRef=RoleRef(apiGroup=RBAC, kind="ClusterRole", name="view"),
            subjects=[Subject(kind="ServiceAccount", name="robot", namespace="default")],
        )
    )
    assert [p async for p in account.list(Pod, namespace="default")] == []
    assert (await _refused(lambda: account.list(Node))).status.code == 403
    await client.create(
        ClusterRole(
            metadata=ObjectMeta(name="nodes-for-viewers", labels={f"{RBAC}/aggregate-to-view": "true"}),
            rules=[PolicyRule(apiGroups=[""], resources=["nodes"], verbs=["list"])],
        )
    )
    assert (await _refused(lambda: account.list(Node))).status.code == 403  # a RoleBinding grants one namespace
    await client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="robot-view"),
            roleRef=RoleRef(apiGroup=RBAC, kind="ClusterRole", name="view"),
            subjects=[Subject(kind="ServiceAccount", name="robot", namespace="default")],
        )
    )
    assert [n async for n in account.list(Node)] == []
    edit = await client.get(ClusterRole, "admin")  # view aggregates into edit, edit into admin
    assert any(rule.resources == ["nodes"] for rule in edit.rules or [])


async def test_a_custom_aggregated_role_follows_its_selector(client: lightkube.AsyncClient) -> None:
    await client.create(
        ClusterRole(
            metadata=ObjectMeta(name="monitoring"),
            aggregationRule=AggregationRule(clusterRoleSelectors=[LabelSelector(matchLabels={"team": "mon"})]),
        )
    )
    rule = PolicyRule(apiGroups=[""], resources=["pods"], verbs=["get"])
    await client.create(ClusterRole(metadata=ObjectMeta(name="mon-pods", labels={"team": "mon"}), rules=[rule]))
    assert (await client.get(ClusterRole, "monitoring")).rules == [rule]
    await client.delete(ClusterRole, "mon-pods")
    assert not (await client.get(ClusterRole, "monitoring")).rules


async def test_the_bootstrap_roles_a_real_cluster_has(client: lightkube.AsyncClient) -> None:
    names = {r.metadata.name async for r in client.list(ClusterRole)}
    assert names >= {
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:basic-user",
        "system:discovery",
        "system:public-info-viewer",
        "system:auth-delegator",
    }
    masters = await client.get(ClusterRoleBinding, "cluster-admin")
    assert [(s.kind, s.name) for s in masters.subjects or []] == [("Group", "system:masters")]
    assert masters.metadata.labels == {"kubernetes.io/bootstrapping": "rbac-defaults"}


async def test_every_authenticated_user_has_discovery_and_self_reviews(account: lightkube.AsyncClient) -> None:
    review = await account.create(
        SelfSubjectAccessReview(
            spec=SelfSubjectAccessReviewSpec(
                resourceAttributes=ResourceAttributes(verb="list", resource="pods", namespace="default")
            )
        )
    )
    assert review.status is not None and review.status.allowed is False
    me = await account.create(SelfSubjectReview())
    assert me.status is not None and me.status.userInfo is not None
    assert me.status.userInfo.username == "system:serviceaccount:default:robot"
    assert me.status.userInfo.groups == [
        "system:serviceaccounts",
        "system:serviceaccounts:default",
        "system:authenticated",
    ]


async def test_access_reviews_answer_with_the_rbac_reason(client: lightkube.AsyncClient) -> None:
    review = await client.create(
        SelfSubjectAccessReview(
            spec=SelfSubjectAccessReviewSpec(
                resourceAttributes=ResourceAttributes(verb="delete", resource="nodes", name="n1")
            )
        )
    )
    assert review.status is not None and review.status.allowed is True
    assert review.status.reason == (
        'RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin" to Group "system:masters"'
    )


async def test_non_resource_urls(client: lightkube.AsyncClient, account: lightkube.AsyncClient) -> None:
    await client.create(
        ClusterRole(metadata=ObjectMeta(name="logs"), rules=[PolicyRule(nonResourceURLs=["/logs/*"], verbs=["get"])])
    )
    await client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="logs"),
            roleRef=RoleRef(apiGroup=RBAC, kind="ClusterRole", name="logs"),
            subjects=[Subject(kind="ServiceAccount", name="robot", namespace="default")],
        )
    )

    async def can(path: str, verb: str = "get") -> bool:
        spec = SelfSubjectAccessReviewSpec(nonResourceAttributes=NonResourceAttributes(path=path, verb=verb))
        answer = await account.create(SelfSubjectAccessReview(spec=spec))
        assert answer.status is not None
        return bool(answer.status.allowed)

    assert await can("/logs/kubelet.log")
    assert not await can("/logs/kubelet.log", "post")
    assert not await can("/metrics")
    assert await can("/apis/apps")  # system:discovery, bound to system:authenticated


async def test_unprivileged_discovery_works_and_other_paths_are_refused(cluster: KubeCluster, robot_token: str) -> None:
    async with _http(cluster, robot_token) as http:
        assert (await http.get(f"{cluster.endpoint}/apis")).status_code == 200
        assert (await http.get(f"{cluster.endpoint}/openapi/v3")).status_code == 200
        refused = await http.get(f"{cluster.endpoint}/metrics")
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        'forbidden: User "system:serviceaccount:default:robot" cannot get path "/metrics"'
    )


async def test_rules_review_lists_what_a_namespace_grants(
    client: lightkube.AsyncClient, account: lightkube.AsyncClient
) -> None:
    rule = PolicyRule(apiGroups=[""], resources=["configmaps"], verbs=["get"])
    await client.create(Role(metadata=ObjectMeta(name="r", namespace="default"), rules=[rule]))
    await client.create(
        RoleBinding(
            metadata=ObjectMeta(name="r", namespace="default"),
            roleRef=RoleRef(apiGroup=RBAC, kind="Role", name="r"),
            subjects=[Subject(kind="ServiceAccount", name="robot")],
        )
    )
    review = await account.create(SelfSubjectRulesReview(spec=SelfSubjectRulesReviewSpec(namespace="default")))
    assert review.status is not None
    assert {"configmaps"} in [set(r.resources or []) for r in review.status.resourceRules]
    elsewhere = await account.create(SelfSubjectRulesReview(spec=SelfSubjectRulesReviewSpec(namespace="kube-system")))
    assert elsewhere.status is not None
    assert {"configmaps"} not in [set(r.resources or []) for r in elsewhere.status.resourceRules]
