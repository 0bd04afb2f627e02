"""Server-side apply: creation, managedFields per manager, conflicts, force, removal."""

from __future__ import annotations

import httpx2
import lightkube
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap

from better_compute.testing.kube import KubeCluster


def cm(data: dict[str, str], labels: dict[str, str] | None = None) -> ConfigMap:
    return ConfigMap(
        apiVersion="v1",
        kind="ConfigMap",
        metadata=ObjectMeta(name="cfg", namespace="default", labels=labels),
        data=data,
    )


def managers(obj: ConfigMap | DaemonSet) -> dict[str, dict[str, object]]:
    return {(m.manager or ""): (m.fieldsV1 or {}) for m in obj.metadata.managedFields or []}


async def test_apply_creates_the_object_and_records_its_manager(
    client: lightkube.AsyncClient, raw: httpx2.AsyncClient
) -> None:
    created = await client.apply(cm({"a": "1"}, {"app": "x"}), field_manager="alice")
    assert created.data == {"a": "1"}
    assert created.metadata.uid
    [entry] = created.metadata.managedFields
    assert (entry.manager, entry.operation, entry.apiVersion, entry.fieldsType) == ("alice", "Apply", "v1", "FieldsV1")
    assert entry.fieldsV1 == {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}
    status = await raw.patch(
        "api/v1/namespaces/default/configmaps/fresh",
        params={"fieldManager": "alice"},
        content="apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\ndata:\n  k: v\n",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert status.status_code == 201
    again = await raw.patch(
        "api/v1/namespaces/default/configmaps/fresh",
        params={"fieldManager": "alice"},
        content="apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\ndata:\n  k: v\n",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert again.status_code == 200


async def test_apply_needs_a_field_manager(raw: httpx2.AsyncClient) -> None:
    response = await raw.patch(
        "api/v1/namespaces/default/configmaps/x",
        content='{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}',
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert response.status_code == 400


async def test_each_manager_owns_its_own_fields(client: lightkube.AsyncClient) -> None:
    await client.apply(cm({"a": "1"}), field_manager="alice")
    both = await client.apply(cm({"b": "2"}), field_manager="bob")
    assert both.data == {"a": "1", "b": "2"}
    owned = managers(both)
    assert owned["alice"] == {"f:data": {"f:a": {}}}
    assert owned["bob"] == {"f:data": {"f:b": {}}}


async def test_conflict_without_force_is_409_with_field_manager_conflict_causes(client: lightkube.AsyncClient) -> None:
    await client.apply(cm({"a": "1", "b": "1"}), field_manager="alice")
    with pytest.raises(lightkube.ApiError) as caught:
        await client.apply(cm({"a": "2", "b": "2"}), field_manager="bob")
    status = caught.value.status
    assert (status.code, status.reason) == (409, "Conflict")
    assert status.message == 'Apply failed with 2 conflicts: conflicts with "alice":\n- .data.a\n- .data.b'
    causes = [(c.reason, c.message, c.field) for c in status.details.causes]
    assert causes == [
        ("FieldManagerConflict", 'conflict with "alice"', ".data.a"),
        ("FieldManagerConflict", 'conflict with "alice"', ".data.b"),
    ]
    assert (await client.get(ConfigMap, "cfg", namespace="default")).data == {"a": "1", "b": "1"}


async def test_conflict_with_an_update_manager_names_its_api_version(client: lightkube.AsyncClient) -> None:
    await client.create(cm({"a": "1"}))
    with pytest.raises(lightkube.ApiError) as caught:
        await client.apply(cm({"a": "2"}), field_manager="bob")
    assert caught.value.status.message.startswith("Apply failed with 1 conflict: conflict with ")
    assert caught.value.status.message.endswith(" using v1: .data.a")


async def test_applying_the_same_value_shares_ownership(client: lightkube.AsyncClient) -> None:
    await client.apply(cm({"a": "1"}), field_manager="alice")
    shared = await client.apply(cm({"a": "1"}), field_manager="bob")
    owned = managers(shared)
    assert owned["alice"] == owned["bob"] == {"f:data": {"f:a": {}}}


async def test_force_takes_the_fields_over(client: lightkube.AsyncClient) -> None:
    await client.apply(cm({"a": "1", "keep": "x"}), field_manager="alice")
    taken = await client.apply(cm({"a": "2"}), field_manager="bob", force=True)
    assert taken.data == {"a": "2", "keep": "x"}
    owned = managers(taken)
    assert owned["alice"] == {"f:data": {"f:keep": {}}}
    assert owned["bob"] == {"f:data": {"f:a": {}}}
    # alice can no longer set `a` without force: bob owns it now
    with pytest.raises(lightkube.ApiError):
        await client.apply(cm({"a": "3", "keep": "x"}), field_manager="alice")


async def test_fields_a_manager_stops_applying_are_removed_unless_shared(client: lightkube.AsyncClient) -> None:
    await client.apply(cm({"a": "1", "b": "1", "c": "1"}), field_manager="alice")
    await client.apply(cm({"c": "1"}), field_manager="bob")
    after = await client.apply(cm({"a": "1"}), field_manager="alice")
    assert after.data == {"a": "1", "c": "1"}


async def test_an_update_takes_ownership_from_the_applier(client: lightkube.AsyncClient) -> None:
    applied = await client.apply(cm({"a": "1"}), field_manager="alice")
    applied.data = {"a": "edited"}
    edited = await client.replace(applied, field_manager="editor")
    owned = managers(edited)
    assert owned["editor"] == {"f:data": {"f:a": {}}}
    assert "alice" not in owned
    with pytest.raises(lightkube.ApiError) as caught:
        await client.apply(cm({"a": "1"}), field_manager="alice")
    assert 'conflict with "editor" using v1: .data.a' in caught.value.status.message


def daemonset(image: str, extra_container: bool = False) -> DaemonSet:
    containers = [{"name": "bcd", "image": image}]
    if extra_container:
        containers.append({"name": "side", "image": "side:1"})
    return DaemonSet.from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "bcd", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "bcd"}},
                "template": {"metadata": {"labels": {"app": "bcd"}}, "spec": {"containers": containers}},
            },
        }
    )


async def test_containers_are_an_associative_list_keyed_by_name(client: lightkube.AsyncClient) -> None:
    applied = await client.apply(daemonset("bcd:1", extra_container=True), field_manager="alice")
    fields = managers(applied)["alice"]
    containers = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]  # type: ignore[index]
    assert containers['k:{"name":"bcd"}'] == {".": {}, "f:image": {}, "f:name": {}}
    with pytest.raises(lightkube.ApiError) as caught:
        await client.apply(daemonset("bcd:2"), field_manager="bob")
    assert caught.value.status.details.causes[0].field == '.spec.template.spec.containers[name="bcd"].image'
    dropped = await client.apply(daemonset("bcd:1"), field_manager="alice")
    assert [c.name for c in dropped.spec.template.spec.containers] == ["bcd"]


async def test_generation_counts_spec_changes_only(client: lightkube.AsyncClient) -> None:
    first = await client.apply(daemonset("bcd:1"), field_manager="alice")
    assert first.metadata.generation == 1
    labelled = daemonset("bcd:1")
    labelled.metadata.labels = {"team": "gpu"}
    second = await client.apply(labelled, field_manager="alice")
    assert second.metadata.generation == 1
    third = await client.apply(daemonset("bcd:2"), field_manager="alice")
    assert third.metadata.generation == 2
    observed = await client.get(DaemonSet, "bcd", namespace="default")
    assert observed.status.observedGeneration == 2


async def test_apply_with_a_stale_resource_version_is_a_conflict(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await client.apply(cm({"a": "1"}), field_manager="alice")
    stale = cm({"a": "2"})
    stale.metadata.resourceVersion = "1"
    with pytest.raises(lightkube.ApiError) as caught:
        await client.apply(stale, field_manager="alice")
    assert caught.value.status.code == 409
    assert cluster.get_object("ConfigMap", "cfg", "default")["data"] == {"a": "1"}  # type: ignore[index]
