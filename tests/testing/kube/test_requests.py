"""GET, LIST with selectors, POST, PUT, DELETE and deletecollection, through lightkube."""

from __future__ import annotations

import httpx2
import lightkube
import pytest
from lightkube import operators as op
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret

from better_compute.core.clock import SimClock
from better_compute.testing.kube import KubeCluster


def config_map(name: str, labels: dict[str, str] | None = None, namespace: str = "default") -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, labels=labels), data={"k": "v"})


@pytest.fixture
async def labelled(client: lightkube.AsyncClient) -> None:
    await client.create(config_map("a", {"tier": "gpu", "zone": "1"}))
    await client.create(config_map("b", {"tier": "cpu", "zone": "2"}))
    await client.create(config_map("c", {"tier": "gpu"}))
    await client.create(config_map("d"))


async def names(client: lightkube.AsyncClient, **selector: object) -> list[str]:
    return [cm.metadata.name async for cm in client.list(ConfigMap, namespace="default", **selector)]  # type: ignore[arg-type]


@pytest.mark.usefixtures("labelled")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gpu", ["a", "c"]),
        ("tier==gpu", ["a", "c"]),
        ("tier!=gpu", ["b", "d"]),
        ("zone in (1,2)", ["a", "b"]),
        ("zone notin (1)", ["b", "c", "d"]),
        ("zone", ["a", "b"]),
        ("!zone", ["c", "d"]),
        ("tier=gpu,zone", ["a"]),
        ("tier in (gpu, cpu),!zone", ["c"]),
    ],
)
async def test_label_selector_equality_and_set_terms(
    raw: httpx2.AsyncClient, selector: str, expected: list[str]
) -> None:
    response = await raw.get("api/v1/namespaces/default/configmaps", params={"labelSelector": selector})
    assert response.status_code == 200
    assert [item["metadata"]["name"] for item in response.json()["items"]] == expected


@pytest.mark.usefixtures("labelled")
async def test_lightkube_selector_operators_reach_the_server(client: lightkube.AsyncClient) -> None:
    assert await names(client, labels={"tier": op.in_(["gpu"]), "zone": op.not_exists()}) == ["c"]
    assert await names(client, labels={"zone": op.not_in(["1"]), "tier": op.exists()}) == ["b", "c"]


@pytest.mark.usefixtures("labelled")
async def test_field_selector_metadata_name(client: lightkube.AsyncClient) -> None:
    assert await names(client, fields={"metadata.name": "b"}) == ["b"]
    assert await names(client, fields={"metadata.name": op.not_equal("b")}) == ["a", "c", "d"]


async def test_unsupported_field_selector_is_a_bad_request(raw: httpx2.AsyncClient) -> None:
    response = await raw.get("api/v1/configmaps", params={"fieldSelector": "data.k=v"})
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"
    assert "field label not supported: data.k" in response.json()["message"]


async def test_list_across_namespaces_and_list_metadata(client: lightkube.AsyncClient, raw: httpx2.AsyncClient) -> None:
    await client.create(Namespace(metadata=ObjectMeta(name="other")))
    await client.create(config_map("x", namespace="other"))
    await client.create(config_map("y"))
    everywhere = [(cm.metadata.namespace, cm.metadata.name) async for cm in client.list(ConfigMap, namespace="*")]
    assert everywhere == [("default", "y"), ("other", "x")]
    body = (await raw.get("api/v1/namespaces/other/configmaps")).json()
    assert body["kind"] == "ConfigMapList"
    assert body["apiVersion"] == "v1"
    assert int(body["metadata"]["resourceVersion"]) >= int(body["items"][0]["metadata"]["resourceVersion"])


async def test_post_on_an_existing_name_is_409_already_exists(client: lightkube.AsyncClient) -> None:
    await client.create(config_map("dup"))
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(config_map("dup"))
    status = caught.value.status
    assert (status.code, status.reason, status.status) == (409, "AlreadyExists", "Failure")
    assert status.message == 'configmaps "dup" already exists'
    assert (status.details.name, status.details.kind) == ("dup", "configmaps")


async def test_missing_object_is_a_404_status_body(raw: httpx2.AsyncClient, client: lightkube.AsyncClient) -> None:
    response = await raw.get("api/v1/namespaces/default/secrets/nope")
    assert response.status_code == 404
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'secrets "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "secrets"},
        "code": 404,
    }
    with pytest.raises(lightkube.ApiError) as caught:
        await client.get(Secret, "nope", namespace="default")
    assert caught.value.status.code == 404


async def test_create_in_a_missing_namespace_is_404(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(config_map("x", namespace="ghost"))
    assert caught.value.status.code == 404
    assert caught.value.status.message == 'namespaces "ghost" not found'


async def test_invalid_name_is_422(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(config_map("Not_Valid"))
    assert (caught.value.status.code, caught.value.status.reason) == (422, "Invalid")


async def test_object_metadata_uid_resource_version_and_creation_timestamp(
    client: lightkube.AsyncClient, clock: SimClock
) -> None:
    created = await client.create(config_map("meta"))
    assert created.metadata.uid
    assert created.metadata.creationTimestamp == clock.now()
    clock.advance(90)
    created.data = {"k": "changed"}
    updated = await client.replace(created)
    assert updated.metadata.uid == created.metadata.uid
    assert updated.metadata.creationTimestamp == created.metadata.creationTimestamp
    assert int(updated.metadata.resourceVersion) > int(created.metadata.resourceVersion)
    again = await client.create(config_map("meta2"))
    assert again.metadata.uid != created.metadata.uid


async def test_put_with_a_stale_resource_version_is_409_conflict(client: lightkube.AsyncClient) -> None:
    first = await client.create(config_map("cas"))
    stale_copy = await client.get(ConfigMap, "cas", namespace="default")
    first.data = {"k": "one"}
    await client.replace(first)
    stale_copy.data = {"k": "two"}
    with pytest.raises(lightkube.ApiError) as caught:
        await client.replace(stale_copy)
    status = caught.value.status
    assert (status.code, status.reason) == (409, "Conflict")
    assert "the object has been modified" in status.message
    assert (await client.get(ConfigMap, "cas", namespace="default")).data == {"k": "one"}


async def test_put_on_a_missing_object_is_404(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.replace(config_map("never-created"))
    assert caught.value.status.code == 404


async def test_no_op_update_keeps_the_resource_version(client: lightkube.AsyncClient) -> None:
    created = await client.create(config_map("same"))
    again = await client.replace(created)
    assert again.metadata.resourceVersion == created.metadata.resourceVersion


async def test_delete_removes_the_object(client: lightkube.AsyncClient) -> None:
    await client.create(config_map("gone"))
    await client.delete(ConfigMap, "gone", namespace="default")
    with pytest.raises(lightkube.ApiError) as caught:
        await client.get(ConfigMap, "gone", namespace="default")
    assert caught.value.status.code == 404
    with pytest.raises(lightkube.ApiError) as again:
        await client.delete(ConfigMap, "gone", namespace="default")
    assert again.value.status.code == 404


@pytest.mark.usefixtures("labelled")
async def test_deletecollection_by_label(raw: httpx2.AsyncClient, client: lightkube.AsyncClient) -> None:
    response = await raw.delete("api/v1/namespaces/default/configmaps", params={"labelSelector": "tier=gpu"})
    assert response.status_code == 200
    assert [i["metadata"]["name"] for i in response.json()["items"]] == ["a", "c"]
    assert await names(client) == ["b", "d"]


async def test_deletecollection_through_lightkube_empties_the_namespace_only(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await client.create(Namespace(metadata=ObjectMeta(name="keep")))
    await client.create(config_map("x", namespace="keep"))
    await client.create(config_map("y"))
    await client.deletecollection(ConfigMap, namespace="default")
    assert [cm["metadata"]["name"] for cm in cluster.objects("ConfigMap")] == ["x"]


async def test_dry_run_is_refused_rather_than_persisted(client: lightkube.AsyncClient, cluster: KubeCluster) -> None:
    dry = lightkube.AsyncClient(client.config, dry_run=True)
    try:
        with pytest.raises(lightkube.ApiError) as caught:
            await dry.create(config_map("dry"))
    finally:
        await dry.close()
    assert caught.value.status.code == 400
    assert cluster.objects("ConfigMap") == []


async def test_status_subresource_is_kept_apart_from_the_main_resource(
    client: lightkube.AsyncClient, raw: httpx2.AsyncClient
) -> None:
    pod = await client.create(
        Pod.from_dict(
            {
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
            }
        )
    )
    assert pod.status.phase == "Pending"
    pod.status.phase = "Succeeded"
    pod.metadata.labels = {"touched": "yes"}
    replaced = await client.replace(pod)
    assert replaced.status.phase == "Pending"
    assert replaced.metadata.labels == {"touched": "yes"}
    body = replaced.to_dict()
    body["status"]["phase"] = "Failed"
    body["metadata"]["labels"] = {"touched": "again"}
    response = await raw.put("api/v1/namespaces/default/pods/p/status", json=body)
    assert response.status_code == 200
    assert response.json()["status"]["phase"] == "Failed"
    assert response.json()["metadata"]["labels"] == {"touched": "yes"}
