"""Every served kind round-trips; finalizers, namespace deletion, garbage collection, watch, faults."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable

import httpx2
import lightkube
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Pod, Secret, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding, Role, RoleBinding
from lightkube.types import CascadeType, PatchType

from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeCluster

KINDS = [
    (Namespace, {"metadata": {"name": "team"}}),
    (ConfigMap, {"metadata": {"name": "cm", "namespace": "default"}, "data": {"a": "b"}}),
    (Secret, {"metadata": {"name": "s", "namespace": "default"}, "stringData": {"token": "t0p"}}),
    (ServiceAccount, {"metadata": {"name": "sa", "namespace": "default"}}),
    (Pod, {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}),
    (
        Event,
        {
            "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "R",
        },
    ),
    (
        DaemonSet,
        {
            "metadata": {"name": "ds", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "i:1"}]},
                },
            },
        },
    ),
    (
        ClusterRole,
        {"metadata": {"name": "cr"}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]},
    ),
    (
        ClusterRoleBinding,
        {
            "metadata": {"name": "crb"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}],
        },
    ),
    (Role, {"metadata": {"name": "r", "namespace": "default"}, "rules": []}),
    (
        RoleBinding,
        {
            "metadata": {"name": "rb", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        },
    ),
    (
        ValidatingAdmissionPolicy,
        {
            "metadata": {"name": "vap"},
            "spec": {"validations": [{"expression": "object.metadata.name != 'x'"}], "failurePolicy": "Fail"},
        },
    ),
    (
        ValidatingAdmissionPolicyBinding,
        {"metadata": {"name": "vapb"}, "spec": {"policyName": "vap", "validationActions": ["Deny"]}},
    ),
]


@pytest.mark.parametrize(("resource", "body"), KINDS, ids=[k[0].__name__ for k in KINDS])
async def test_every_served_kind_round_trips(
    client: lightkube.AsyncClient, resource: type, body: dict[str, object]
) -> None:
    created = await client.create(resource.from_dict(body))  # type: ignore[attr-defined]
    namespace = created.metadata.namespace
    fetched = await client.get(resource, created.metadata.name, namespace=namespace)
    assert fetched.metadata.uid == created.metadata.uid
    listed = [o.metadata.name async for o in client.list(resource, namespace=namespace or None)]
    assert created.metadata.name in listed
    await client.delete(resource, created.metadata.name, namespace=namespace)


async def test_secret_string_data_is_stored_as_base64_data(client: lightkube.AsyncClient) -> None:
    await client.create(Secret.from_dict(KINDS[2][1]))
    secret = await client.get(Secret, "s", namespace="default")
    assert secret.data == {"token": base64.b64encode(b"t0p").decode()}
    assert secret.stringData is None
    assert secret.type == "Opaque"


async def test_every_namespace_gets_a_default_service_account(client: lightkube.AsyncClient) -> None:
    await client.create(Namespace(metadata=ObjectMeta(name="fresh")))
    names = [sa.metadata.name async for sa in client.list(ServiceAccount, namespace="fresh")]
    assert names == ["default"]


async def test_finalizers_keep_an_object_until_they_are_removed(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await client.create(
        ConfigMap(metadata=ObjectMeta(name="held", namespace="default", finalizers=["example.com/hold"]))
    )
    await client.delete(ConfigMap, "held", namespace="default")
    held = await client.get(ConfigMap, "held", namespace="default")
    assert held.metadata.deletionTimestamp is not None
    assert held.metadata.finalizers == ["example.com/hold"]
    await client.patch(
        ConfigMap, "held", {"metadata": {"finalizers": None}}, namespace="default", patch_type=PatchType.MERGE
    )
    assert cluster.get_object("ConfigMap", "held", "default") is None


async def test_namespace_deletion_removes_its_contents_then_itself(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await client.create(Namespace(metadata=ObjectMeta(name="doomed")))
    await client.create(ConfigMap(metadata=ObjectMeta(name="x", namespace="doomed")))
    await client.create(ConfigMap(metadata=ObjectMeta(name="y", namespace="doomed", finalizers=["hold"])))
    await client.delete(Namespace, "doomed")
    terminating = await client.get(Namespace, "doomed")
    assert terminating.status.phase == "Terminating"
    assert [o["metadata"]["name"] for o in cluster.objects("ConfigMap", "doomed")] == ["y"]
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(ConfigMap(metadata=ObjectMeta(name="late", namespace="doomed")))
    assert caught.value.status.code == 403
    await client.patch(
        ConfigMap, "y", {"metadata": {"finalizers": None}}, namespace="doomed", patch_type=PatchType.MERGE
    )
    assert cluster.get_object("Namespace", "doomed") is None


async def test_system_namespaces_may_not_be_deleted(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.delete(Namespace, "kube-system")
    assert (caught.value.status.code, caught.value.status.reason) == (403, "Forbidden")
    assert (await client.get(Namespace, "kube-system")).status.phase == "Active"


def owned_config_map(name: str, owner: ConfigMap) -> ConfigMap:
    return ConfigMap.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "default",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid}
                ],
            }
        }
    )


async def test_garbage_collector_deletes_dependents_in_the_background(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    owner = await client.create(ConfigMap(metadata=ObjectMeta(name="owner", namespace="default")))
    await client.create(owned_config_map("dependent", owner))
    await client.delete(ConfigMap, "owner", namespace="default")
    assert cluster.objects("ConfigMap") == []


async def test_foreground_deletion_waits_for_dependents_and_orphan_keeps_them(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    owner = await client.create(ConfigMap(metadata=ObjectMeta(name="owner", namespace="default", finalizers=["hold"])))
    await client.create(owned_config_map("dependent", owner))
    await client.delete(ConfigMap, "owner", namespace="default", cascade=CascadeType.FOREGROUND)
    remaining = await client.get(ConfigMap, "owner", namespace="default")
    assert remaining.metadata.finalizers == ["hold"]
    assert cluster.get_object("ConfigMap", "dependent", "default") is None
    kept_owner = await client.create(ConfigMap(metadata=ObjectMeta(name="parent", namespace="default")))
    await client.create(owned_config_map("orphan", kept_owner))
    await client.delete(ConfigMap, "parent", namespace="default", cascade=CascadeType.ORPHAN)
    orphan = await client.get(ConfigMap, "orphan", namespace="default")
    assert orphan.metadata.ownerReferences is None


async def test_watch_streams_added_modified_and_deleted(client: lightkube.AsyncClient) -> None:
    seen: list[tuple[str, str]] = []

    async def follow() -> None:
        async for kind, obj in client.watch(ConfigMap, namespace="default", labels={"w": "1"}):
            seen.append((kind, obj.metadata.name))
            if kind == "DELETED":
                return

    await client.create(ConfigMap(metadata=ObjectMeta(name="before", namespace="default", labels={"w": "1"})))
    watcher = asyncio.create_task(follow())
    while not seen:
        await asyncio.sleep(0.01)
    await client.create(ConfigMap(metadata=ObjectMeta(name="other", namespace="default")))
    await client.patch(ConfigMap, "before", {"data": {"x": "y"}}, namespace="default", patch_type=PatchType.MERGE)
    await client.delete(ConfigMap, "before", namespace="default")
    await asyncio.wait_for(watcher, timeout=10)
    assert seen == [("ADDED", "before"), ("MODIFIED", "before"), ("DELETED", "before")]


async def test_an_unresponsive_api_server_times_out_the_client(
    cluster: KubeCluster, credentials_for: Callable[..., ClusterCredentials]
) -> None:
    cluster.unresponsive = True
    api = kube_client(credentials_for(cluster), timeout=0.3)
    try:
        with pytest.raises(httpx2.TimeoutException):
            await api.get(ConfigMap, "x", namespace="default")
        cluster.unresponsive = False
        with pytest.raises(lightkube.ApiError) as caught:
            await api.get(ConfigMap, "x", namespace="default")
        assert caught.value.status.code == 404
    finally:
        await api.close()


async def test_an_injected_failure_answers_one_matching_request_and_changes_nothing(
    cluster: KubeCluster, client: lightkube.AsyncClient
) -> None:
    await client.create(ConfigMap(metadata=ObjectMeta(name="kept", namespace="default"), data={"a": "1"}))
    cluster.fail_next("patch", "configmaps", "kept")
    await client.get(ConfigMap, "kept", namespace="default")  # another verb is not failed
    with pytest.raises(lightkube.ApiError) as caught:
        await client.patch(ConfigMap, "kept", {"data": {"a": "2"}}, namespace="default", patch_type=PatchType.MERGE)
    assert (caught.value.status.code, caught.value.status.reason) == (500, "InternalError")
    assert (await client.get(ConfigMap, "kept", namespace="default")).data == {"a": "1"}
    await client.patch(ConfigMap, "kept", {"data": {"a": "2"}}, namespace="default", patch_type=PatchType.MERGE)
    assert (await client.get(ConfigMap, "kept", namespace="default")).data == {"a": "2"}
