"""The nodes step (`nodes`): lists the substrate's Nodes through the client, fences, then matches them;
its update carries what it listed and saw, and a failed list or match is its error."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from lightkube.models.core_v1 import NodeSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node as KubeNode

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.names import CAPACITY_LABEL, LEAVING_ANNOTATION, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.substrates import nodes_step
from better_compute.kubernetes.substrates.nodes_step import ListedNode, NodesSeen, NodesStep


class Client:
    """Just `list(Node, labels=...)`, recording the selector."""

    def __init__(self, nodes: list[KubeNode], events: list[str]) -> None:
        self.nodes, self.events = nodes, events
        self.selectors: list[dict[str, str]] = []

    async def list(self, kind: type, *, labels: dict[str, str]) -> AsyncIterator[KubeNode]:
        assert kind is KubeNode
        self.selectors.append(labels)
        self.events.append("list")
        for node in self.nodes:
            yield node


def node(name: str, *, spot: bool = False, leaving: str | None = None) -> KubeNode:
    labels = {"cloud.example/pool": "gpu-a", "topology.kubernetes.io/zone": "z1"}
    if spot:
        labels[CAPACITY_LABEL] = "spot"
    annotations = {LEAVING_ANNOTATION: leaving} if leaving else None
    meta = ObjectMeta(name=name, uid=f"uid-{name}", labels=labels, annotations=annotations)
    return KubeNode(metadata=meta, spec=NodeSpec(providerID=f"gce://{name}"))


async def test_the_nodes_listed_are_matched_after_a_fence_and_handed_on(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = steps()
    client = Client([node("n1"), node("n2", spot=True, leaving="cordoned")], fakes.events)
    seen = NodesSeen(("n1", "n2"), ("n1",), ("n2",), 1, None)
    matched: list[dict[str, Any]] = []

    async def match(feed: Any, run: Any, **kw: Any) -> NodesSeen:
        fakes.events.append("match")
        matched.append({"feed": feed, "run": run, **kw})
        return seen

    monkeypatch.setattr(nodes_step, "match_and_retire", match)
    result = await NodesStep().run(fakes.with_(client=client))
    assert fakes.events == ["list", "fence", "match"], "the retire writes come after the fence"
    assert client.selectors == [{SUBSTRATE_POOL_LABEL: "pool-1"}]
    assert (result.condition, result.status, result.message) == ("nodes", "ok", "2 listed, 1 joined, 1 retired")
    assert result.requeue_after is None
    listed = (
        ListedNode("n1", False, "uid-n1", "gpu-a", "z1", "gce://n1", None),
        ListedNode("n2", True, "uid-n2", "gpu-a", "z1", "gce://n2", "cordoned"),
    )
    assert result.update.listed == listed and result.update.seen == seen
    assert matched[0]["listed"] == list(listed) and matched[0]["now"] == fakes.ctx.now
    assert (matched[0]["tenant_id"], matched[0]["pool_id"], matched[0]["feed"]) == ("tenant-1", "pool-1", "feed")


async def test_a_match_that_fails_is_the_condition_s_error_with_nothing_handed_on(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = steps()

    async def match(*_: Any, **__: Any) -> NodesSeen:
        raise ComputeError(ErrorCode.UNAVAILABLE, "the database is away")

    monkeypatch.setattr(nodes_step, "match_and_retire", match)
    result = await NodesStep().run(fakes.with_(client=Client([node("n1")], fakes.events)))
    assert (result.status, result.message) == ("error", "the database is away")
    assert result.update.listed is None and result.update.seen is None
