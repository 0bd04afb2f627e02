"""DOKS' quota: the account's droplet limit (pydo `account.get`, `GET /v2/account`) against the droplets it runs
(pydo `droplets.list`, `GET /v2/droplets`'s `meta.total`), every DOKS node being a droplet."""

from __future__ import annotations

import pytest
from doks_world import World
from test_doks_machines import two_nodes

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import QuotaNeed


async def test_the_droplet_limit_counts_every_node_and_every_other_droplet(world: World) -> None:
    await two_nodes(world)  # a one-node bc-system pool and two nodes: three droplets
    world.doks.faults.quota(droplets=10)
    world.doks.run_droplets(4)

    (quota,) = await world.driver.quotas(
        world.account(), "tor1", (QuotaNeed("gpu-h100x8-640gb", 2), QuotaNeed("s-1vcpu-2gb", 2))
    )

    assert ("GET", "/v2/account") in world.doks.requests and ("GET", "/v2/droplets") in world.doks.requests
    assert (quota.metric, quota.name, quota.unit, quota.scope) == ("droplet_limit", "Droplet limit", "Droplets", "")
    assert (quota.limit, quota.usage, quota.adds, quota.exceeded) == (10, 7, 4, True)
    assert await world.driver.quotas(world.account(), "tor1", ()) == ()


@pytest.mark.parametrize("scope", ["account:read", "droplet:read"])
async def test_a_token_without_the_read_scope_gets_permission_denied(world: World, scope: str) -> None:
    world.doks.faults.forbid(scope)
    with pytest.raises(ComputeError) as caught:
        await world.driver.quotas(world.account(), "tor1", (QuotaNeed("gpu-h100x8-640gb", 1),))
    assert caught.value.code is ErrorCode.PERMISSION_DENIED
    assert "You are not authorized to perform this operation" in str(caught.value)
    assert "dop_v1_" not in str(caught.value)


async def test_the_emulator_refuses_nodes_past_the_limit_it_reports(world: World) -> None:
    world.doks.run_droplets(998)
    limit = await world.driver.quotas(world.account(), "tor1", (QuotaNeed("s-1vcpu-2gb", 3),))
    assert (limit[0].limit, limit[0].usage, limit[0].exceeded) == (1000, 998, True)
    with pytest.raises(ComputeError, match="droplet limit"):
        await two_nodes(world)  # the cluster's bc-system node fits (999); two more nodes would be 1001
