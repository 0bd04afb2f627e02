"""Sites and pools: names per tenant, updates in place, and the archive (active -> archiving -> archived)."""

from __future__ import annotations

import pytest

from better_compute.compute import finish_archive, retire, update_pool
from better_compute.core.errors import ComputeError

from .conftest import World


async def test_a_pool_with_nothing_to_tear_down_is_archived_at_once(world: World) -> None:
    archived = await world.compute.pools.archive(world.tenant.id, world.pool_id)
    assert archived.state == "archived"
    assert await world.compute.pools.list(world.tenant.id) == []
    assert [p.id for p in await world.compute.pools.list(world.tenant.id, include_archived=True)] == [world.pool_id]
    again = await world.compute.pools.create(world.tenant.id, "gpu-fleet", world.site_id, "metal-host", "H100")
    assert again.id != world.pool_id and again.state == "active"  # an archived pool's name may be used again


async def test_archiving_stops_bookings_cordons_nodes_and_keeps_what_is_booked(world: World) -> None:
    node = await world.node("n1", 4)
    held = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    archiving = await world.compute.pools.archive(world.tenant.id, world.pool_id)
    assert archiving.state == "archiving"
    assert (await world.compute.nodes.get(world.tenant.id, node.id)).state == "cordoned"
    assert (await world.compute.reservations.get(world.tenant.id, held.id)).state == "active"  # never force-released
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert (err.value.code, err.value.path) == ("INVALID_STATE", "/poolId")
    assert (await world.compute.pools.archive(world.tenant.id, world.pool_id)).state == "archiving"
    await world.compute.reservations.release(world.tenant.id, held.id)
    async with world.compute.nodes.transaction() as session:
        await retire(session, node.id, world.clock.now(), reason="test")
    assert (await world.compute.pools.get(world.tenant.id, world.pool_id)).state == "archived"


async def test_a_substrate_pool_waits_for_its_teardown_to_finish(world: World) -> None:
    policy = {"substrate": {"kind": "kubernetes", "account": "managed-k8s"}}
    pool = await world.compute.pools.create(world.tenant.id, "k8s-pool", world.site_id, "metal-host", "H100", policy)
    node = await world.node("n1", 1, pool_id=pool.id)
    assert (await world.compute.pools.archive(world.tenant.id, pool.id)).state == "archiving"
    with pytest.raises(ComputeError) as err:
        async with world.db.transaction() as session:
            await finish_archive(session, now=world.clock.now(), pool_id=pool.id)
    assert err.value.code == "INVALID_STATE"
    async with world.compute.nodes.transaction() as session:
        await retire(session, node.id, world.clock.now(), reason="test")
    assert (await world.compute.pools.get(world.tenant.id, pool.id)).state == "archiving"
    async with world.db.transaction() as session:
        assert (await finish_archive(session, now=world.clock.now(), pool_id=pool.id)).state == "archived"


async def test_a_pool_changes_in_place_while_active_only(world: World) -> None:
    async with world.db.transaction() as session:
        updated = await update_pool(
            session,
            now=world.clock.now(),
            tenant_id=world.tenant.id,
            pool_id=world.pool_id,
            site_id=world.site_id,
            pool_class="metal-host",
            gpu_model="H200",
            policy={"kubernetes": {"platformOperated": True}},
        )
    assert (updated.gpu_model, updated.policy) == ("H200", {"kubernetes": {"platformOperated": True}})
    await world.compute.pools.archive(world.tenant.id, world.pool_id)
    with pytest.raises(ComputeError) as err:
        async with world.db.transaction() as session:
            await update_pool(
                session,
                now=world.clock.now(),
                tenant_id=world.tenant.id,
                pool_id=world.pool_id,
                site_id=world.site_id,
                pool_class="metal-host",
                gpu_model="H100",
                policy={},
            )
    assert err.value.code == "INVALID_STATE"


async def test_names_are_unique_per_tenant_and_pools_are_private(world: World) -> None:
    with pytest.raises(ComputeError) as err:
        await world.compute.pools.create(world.tenant.id, "gpu-fleet", world.site_id, "metal-host", "H100")
    assert (err.value.code, err.value.path) == ("CONFLICT", "/name")
    with pytest.raises(ComputeError) as err:
        await world.compute.sites.create(world.tenant.id, "k8s", "shared")
    assert (err.value.code, err.value.path) == ("CONFLICT", "/name")
    other = await world.iam.create_tenant("other")
    site = await world.compute.sites.create(other.id, "k8s", "shared", "tor1")
    pool = await world.compute.pools.create(other.id, "gpu-fleet", site.id, "metal-host", "H100")
    assert pool.tenant_id == other.id
    for call in (world.compute.pools.get, world.compute.pools.archive):
        with pytest.raises(ComputeError) as err:
            await call(world.tenant.id, pool.id)
        assert (err.value.code, err.value.path) == ("NOT_FOUND", "/poolId")
    with pytest.raises(ComputeError) as err:  # another tenant's site cannot hold my pool
        await world.compute.pools.create(world.tenant.id, "mine", site.id, "metal-host")
    assert (err.value.code, err.value.path) == ("NOT_FOUND", "/siteId")
    assert (await world.compute.pools.get_by_name(other.id, "gpu-fleet")).id == pool.id


async def test_a_site_in_use_is_not_deleted(world: World) -> None:
    with pytest.raises(ComputeError) as err:
        await world.compute.sites.delete(world.tenant.id, world.site_id)
    assert err.value.code == "INVALID_STATE"
    empty = await world.compute.sites.create(world.tenant.id, "spare", "shared")
    await world.compute.sites.delete(world.tenant.id, empty.id)
    assert [s.name for s in await world.compute.sites.list(world.tenant.id)] == ["k8s"]
