"""Wire formats kubectl depends on, tested without kubectl: tables, protobuf bodies, OpenAPI v2, watch resume."""

from __future__ import annotations

import json

import httpx2
import lightkube
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

import better_compute.testing.kube as kube
from better_compute.testing.kube import KubeCluster


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def entry(key: str, value: bytes) -> bytes:
    return field(1, key.encode()) + field(2, value)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return b"k8s\x00" + field(1, type_meta) + field(2, raw) + field(4, b"application/vnd.kubernetes.protobuf")


async def test_protobuf_config_map_and_secret_bodies_are_decoded(raw: httpx2.AsyncClient) -> None:
    meta = field(1, b"settings") + field(11, entry("app", b"bc"))
    config_map = field(1, meta) + field(2, entry("a", b"b")) + field(2, entry("c", b"d"))
    headers = {
        "Content-Type": "application/vnd.kubernetes.protobuf",
        "Accept": "application/vnd.kubernetes.protobuf,application/json",
    }
    response = await raw.post(
        "api/v1/namespaces/default/configmaps", content=envelope("v1", "ConfigMap", config_map), headers=headers
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["metadata"]["name"], body["metadata"]["labels"], body["data"]) == (
        "settings",
        {"app": "bc"},
        {"a": "b", "c": "d"},
    )
    secret = field(1, field(1, b"s")) + field(2, entry("tok", b"\x00\x01")) + field(3, b"Opaque")
    response = await raw.post(
        "api/v1/namespaces/default/secrets", content=envelope("v1", "Secret", secret), headers=headers
    )
    assert response.status_code == 201
    assert response.json()["data"] == {"tok": "AAE="}


def varint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


async def test_protobuf_bodies_of_rbac_policy_and_delete_options(raw: httpx2.AsyncClient) -> None:
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    rule = field(1, b"get") + field(2, b"") + field(3, b"pods")  # verbs, apiGroups, resources
    role = field(1, field(1, b"reader")) + field(2, rule)
    response = await raw.post(
        "apis/rbac.authorization.k8s.io/v1/clusterroles",
        content=envelope("rbac.authorization.k8s.io/v1", "ClusterRole", role),
        headers=headers,
    )
    assert response.status_code == 201, response.text
    assert response.json()["rules"] == [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]
    percent = varint_field(1, 1) + field(3, b"50%")  # IntOrString{type: String, strVal}
    selector = field(1, entry("app", b"web"))
    budget = field(1, field(1, b"web")) + field(2, field(1, percent) + field(2, selector))
    response = await raw.post(
        "apis/policy/v1/namespaces/default/poddisruptionbudgets",
        content=envelope("policy/v1", "PodDisruptionBudget", budget),
        headers=headers,
    )
    assert response.status_code == 201, response.text
    assert response.json()["spec"] == {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}
    options = field(2, field(1, b"wrong-uid")) + field(4, b"Foreground")  # preconditions.uid, propagationPolicy
    response = await raw.request(
        "DELETE",
        "apis/rbac.authorization.k8s.io/v1/clusterroles/reader",
        content=envelope("v1", "DeleteOptions", options),
        headers=headers,
    )
    assert response.status_code == 409
    assert "Precondition failed: UID in precondition: wrong-uid" in response.json()["message"]


async def test_protobuf_bodies_of_kinds_not_served_are_415_and_unknown_fields_400(
    raw: httpx2.AsyncClient,
) -> None:
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    pod = await raw.post(
        "api/v1/namespaces/default/pods",
        content=envelope("v1", "Pod", field(1, field(1, b"p"))),
        headers=headers,
    )
    assert pod.status_code == 201 and pod.json()["metadata"]["name"] == "p"
    response = await raw.post(
        "api/v1/namespaces/default/pods",
        content=envelope("apps/v1", "Deployment", field(1, field(1, b"d"))),
        headers=headers,
    )
    assert response.status_code == 415
    assert response.json()["message"] == (
        "the body of the request was in an unknown format: application/vnd.kubernetes.protobuf for apps/v1 Deployment"
    )
    response = await raw.post(
        "api/v1/namespaces/default/configmaps",
        content=envelope("v1", "ConfigMap", field(1, field(1, b"c")) + field(9, b"?")),
        headers=headers,
    )
    assert response.status_code == 400
    assert "fields of ConfigMap that the Kubernetes API emulator does not model (field numbers 9)" in response.text


async def test_openapi_v2_is_a_protobuf_document_naming_field_validation(raw: httpx2.AsyncClient) -> None:
    response = await raw.get(
        "openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    document = response.content
    assert document.startswith(field(1, b"2.0"))
    assert b"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}" in document
    assert b"x-kubernetes-group-version-kind" in document and b"fieldValidation" in document


async def test_get_as_table(raw: httpx2.AsyncClient, cluster: KubeCluster) -> None:
    await cluster.kubelet.add_node("n1")
    response = await raw.get(
        "api/v1/nodes", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    )
    table = response.json()
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Roles", "Age", "Version"]
    assert table["rows"][0]["cells"] == ["n1", "Ready", "<none>", "0s", "v1.31.2"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    plain = (await raw.get("api/v1/nodes")).json()
    assert plain["kind"] == "NodeList"


async def test_watch_from_a_resource_version_replays_later_changes(
    client: lightkube.AsyncClient, raw: httpx2.AsyncClient
) -> None:
    first = await client.create(ConfigMap(metadata=ObjectMeta(name="a", namespace="default")))
    await client.create(ConfigMap(metadata=ObjectMeta(name="b", namespace="default")))
    await client.delete(ConfigMap, "a", namespace="default")
    params = {"watch": "true", "resourceVersion": first.metadata.resourceVersion}
    seen: list[tuple[str, str]] = []
    async with raw.stream("GET", "api/v1/namespaces/default/configmaps", params=params) as response:
        async for line in response.aiter_lines():
            event = json.loads(line)
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                break
    assert seen == [("ADDED", "b"), ("DELETED", "a")]


def test_public_surface() -> None:
    assert sorted(kube.__all__) == [
        "Attributes",
        "Authenticator",
        "Authorizer",
        "ContainerRun",
        "KubeApiServer",
        "KubeCluster",
        "KubeletSimulator",
        "NodeRun",
        "PodRun",
        "PodRuntime",
        "TokenReview",
    ]
    for name in kube.__all__:
        assert getattr(kube, name) is not None
