"""A GPU reset without a reboot, end to end (DOKS world, the real bcd on every Node): a GPU that fell
off the bus stays off sale however long it waits, and once it is reset (`nvidia-smi -r`: it answers
NVML again) it returns after the clean period, not before, and takes bookings."""

from __future__ import annotations

from e2e_world import World

from better_compute.bcd.simnvml import forget_simulated_nvml, simulated_nvml


async def joined(world: World, count: int) -> bool:
    view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


async def test_a_lost_gpu_returns_after_a_reset_and_the_clean_period(world: World) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined")
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    node = (await world.compute.nodes.list(world.tenant_id, pool_id=pool.id))[0]
    name = node.kubernetes_node_name
    assert name is not None
    gpu = node.devices[0]

    async def health() -> str | None:
        devices = (await world.compute.nodes.get(world.tenant_id, node.id)).devices
        return next(d.health_reason for d in devices if d.uuid == gpu.uuid)

    try:
        simulated_nvml(name).inject(gpu.index, xid=79, lost=True)

        async def lost() -> bool:
            return await health() == "gpu-lost"

        await world.until(lost, minutes=1, what="the lost GPU reaches the control plane", every=1)
        start = world.cloud.clock.now()

        async def an_hour_on() -> bool:
            return (world.cloud.clock.now() - start).total_seconds() >= 3600

        await world.until(an_hour_on, minutes=61, what="an hour passes", every=60)
        assert await health() == "gpu-lost", "held: a lost GPU does not come back by itself"

        simulated_nvml(name).clear(gpu.index)  # the GPU was reset: NVML reaches it again
        reset = world.cloud.clock.now()

        async def back() -> bool:
            return await health() is None

        await world.until(back, minutes=15, what="the GPU back on sale", every=1)
        waited = (world.cloud.clock.now() - reset).total_seconds()
        assert 600 <= waited <= 615, f"back after {waited} s: after a reset, 10 minutes of healthy readings"
        await world.compute.quotas.set(world.tenant_id, "H100", 64)
        both = [await world.compute.reservations.create(world.tenant_id, pool.id, 8) for _ in range(2)]
        assert {r.node_id for r in both} == {n.id for n in await world.compute.nodes.list(world.tenant_id)}
    finally:
        forget_simulated_nvml(name)
