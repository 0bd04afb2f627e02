"""The spec's story on GKE, EKS and DOKS: apply, the cluster appears, bcd joins, book, scale, reclaim, prune."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.core.errors import ComputeError
from conftest import World

SUBSTRATE = "/pools/0/policy/substrate"


async def substrate(world: World) -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")


async def ready_and_joined(world: World, count: int) -> bool:
    try:
        view = await substrate(world)
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_listed) == count and len(view.nodes_joined) == count


@pytest.mark.parametrize(("provider", "nodes"), [("gke", 2), ("eks", 4), ("doks", 2)])
async def test_apply_makes_a_cluster_whose_nodes_join_through_bcd(world: World, provider: str, nodes: int) -> None:
    await world.compute.fleet.apply(world.document(provider), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, nodes), minutes=90, what="ready with every Node joined")
    view = await substrate(world)
    assert view.cluster is not None and view.cluster.status == "ready"
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    members = await world.compute.nodes.list(world.tenant_id, pool_id=pool.id)
    assert sorted(n.kubernetes_node_name or "" for n in members) == sorted(view.nodes_joined)
    assert all(n.state == "ready" and n.connected and len(n.devices) == 8 for n in members)
