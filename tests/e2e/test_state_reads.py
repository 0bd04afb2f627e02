"""The state reads say what the provider says: an adopted cluster's location, a node pool's status.

Once a substrate is `ready` and its Nodes have joined, the substrate read and the cluster read
(Python, HTTP and CLI share them) show the location and node pool status the provider answers.
"""

from __future__ import annotations

import pytest
from adopt_world import PER_ZONE, adopting, ready_and_joined, seed, view
from e2e_world import World

from better_compute.kubernetes.provider import ClusterState, NodePoolState

COARSE = 30.0
"""How often (simulated seconds) a wait with no time bound on what it waits for looks again (a look costs a step)."""


async def at_provider(world: World, cluster_id: str, pool: str) -> tuple[ClusterState, NodePoolState]:
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await k.account(world.tenant_id, "managed-k8s")
    state = await driver.get_cluster(account, cluster_id)
    node_pool = await driver.get_node_pool(account, state.cluster_id, pool)
    assert state is not None and state.outputs is not None and node_pool is not None
    return state, node_pool


@pytest.mark.parametrize("mode", ["adopt", "create"])
@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_ready_substrate_reads_the_providers_location_and_node_pool_status(
    world: World, provider: str, mode: str
) -> None:
    if mode == "adopt":
        document = adopting(world, provider, await seed(world, provider))
        nodes = PER_ZONE[provider]
    else:
        document = world.document(provider)
        nodes = 2 * PER_ZONE[provider]
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, nodes), minutes=90, what="ready and joined", every=COARSE)
    current = await view(world)
    assert current.cluster is not None and current.cluster.provider_cluster_id is not None
    (record,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    (pool,) = record.node_pools
    state, node_pool = await at_provider(world, current.cluster.provider_cluster_id, pool.name)
    assert state.outputs is not None and state.outputs.location
    assert current.cluster.location == state.outputs.location == record.location
    assert (pool.status, node_pool.status.value) == ("ready", "ready")
