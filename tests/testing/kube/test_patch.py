"""JSON merge patch, strategic merge patch and JSON patch."""

from __future__ import annotations

import lightkube
import pytest
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from better_compute.testing.kube import KubeCluster


async def test_strategic_merge_patch_cordons_a_node(client: lightkube.AsyncClient, cluster: KubeCluster) -> None:
    await cluster.kubelet.add_node("n1", labels={"pool": "gpu"})
    cordoned = await client.patch(Node, "n1", {"spec": {"unschedulable": True}}, patch_type=PatchType.STRATEGIC)
    assert cordoned.spec.unschedulable is True
    assert cordoned.metadata.labels["pool"] == "gpu"
    managers = {m.manager: m.fieldsV1 for m in cordoned.metadata.managedFields}
    assert managers["better-compute"] == {"f:spec": {"f:unschedulable": {}}}
    assert "f:spec" not in managers["kubelet"]


async def test_merge_patch_sets_and_null_removes(client: lightkube.AsyncClient, cluster: KubeCluster) -> None:
    await cluster.kubelet.add_node("n1", labels={"a": "1", "b": "2"})
    patched = await client.patch(
        Node,
        "n1",
        {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"unschedulable": True}},
        patch_type=PatchType.MERGE,
    )
    assert "a" not in patched.metadata.labels
    assert (patched.metadata.labels["b"], patched.metadata.labels["c"]) == ("2", "3")
    uncordoned = await client.patch(Node, "n1", {"spec": {"unschedulable": None}}, patch_type=PatchType.MERGE)
    assert uncordoned.spec.unschedulable is None


def ds_body() -> dict[str, object]:
    return {
        "metadata": {"name": "ds", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "ds"}},
            "template": {
                "metadata": {"labels": {"app": "ds"}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "main:1", "env": [{"name": "A", "value": "1"}]},
                        {"name": "side", "image": "side:1"},
                    ],
                    "tolerations": [{"key": "x", "operator": "Exists"}],
                },
            },
        },
    }


async def test_strategic_merge_patch_merges_containers_by_name(client: lightkube.AsyncClient) -> None:
    await client.create(DaemonSet.from_dict(ds_body()))
    patch = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "main", "image": "main:2", "env": [{"name": "B", "value": "2"}]}]}
            }
        }
    }
    patched = await client.patch(DaemonSet, "ds", patch, namespace="default", patch_type=PatchType.STRATEGIC)
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert containers["main"].image == "main:2"
    assert [(e.name, e.value) for e in containers["main"].env] == [("A", "1"), ("B", "2")]
    assert containers["side"].image == "side:1"
    assert patched.metadata.generation == 2


async def test_strategic_merge_patch_delete_directive_and_atomic_lists(client: lightkube.AsyncClient) -> None:
    await client.create(DaemonSet.from_dict(ds_body()))
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "side", "$patch": "delete"}],
                    "tolerations": [{"key": "y", "operator": "Exists"}],
                }
            }
        }
    }
    patched = await client.patch(DaemonSet, "ds", patch, namespace="default", patch_type=PatchType.STRATEGIC)
    assert [c.name for c in patched.spec.template.spec.containers] == ["main"]
    assert [t.key for t in patched.spec.template.spec.tolerations] == ["y"]


async def test_merge_patch_replaces_lists(client: lightkube.AsyncClient) -> None:
    await client.create(DaemonSet.from_dict(ds_body()))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "only:1"}]}}}}
    patched = await client.patch(DaemonSet, "ds", patch, namespace="default", patch_type=PatchType.MERGE)
    assert [c.name for c in patched.spec.template.spec.containers] == ["only"]


async def test_json_patch_and_failed_test_operation(client: lightkube.AsyncClient, cluster: KubeCluster) -> None:
    await cluster.kubelet.add_node("n1", labels={"a": "1"})
    patched = await client.patch(
        Node,
        "n1",
        [{"op": "add", "path": "/metadata/labels/b", "value": "2"}, {"op": "remove", "path": "/metadata/labels/a"}],
        patch_type=PatchType.JSON,
    )
    assert patched.metadata.labels["b"] == "2"
    assert "a" not in patched.metadata.labels
    with pytest.raises(lightkube.ApiError) as caught:
        await client.patch(
            Node, "n1", [{"op": "test", "path": "/metadata/labels/b", "value": "9"}], patch_type=PatchType.JSON
        )
    assert caught.value.status.code == 422


async def test_patch_on_a_missing_object_is_404(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.patch(Node, "ghost", {"spec": {"unschedulable": True}}, patch_type=PatchType.STRATEGIC)
    assert caught.value.status.code == 404
    assert caught.value.status.message == 'nodes "ghost" not found'
