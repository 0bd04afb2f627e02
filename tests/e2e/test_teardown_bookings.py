"""Teardown never force-ends a booking: one made after its count, before its final step, stops it.

The substrate of an adopted DOKS cluster is removed from the pool (which stays active). Its
teardown counts no booking, removes bcd, deletes its node pool and, in its last run, takes back
its access to the cluster. While it does (at the revoke of bc-substrate's binding), the operator uncordons a
node and books it through the public doors. The step that retires the nodes counts again under
the pool's lock, finds the booking and stops: it stays active, the substrate says it waits for
it, and once it is released the teardown finishes.
"""

from __future__ import annotations

from adopt_world import adopting, only_kube, ready_and_joined, seed, view
from e2e_world import World

from better_compute.compute import Reservation
from better_compute.kubernetes.calls import Call, watch_calls
from better_compute.kubernetes.cluster_access.join_reviewer import REVIEWER_ROLE


async def test_a_booking_made_during_the_last_teardown_run_is_not_force_ended(world: World) -> None:
    adopt_id = await seed(world, "doks")
    document = adopting(world, "doks", adopt_id)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), what="adopted and joined")
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    booked: list[Reservation] = []

    kube = only_kube(world)

    async def book_meanwhile(call: Call) -> None:
        """At the last run's revoke (after its count of bookings): uncordon a node and book it. The revoke's
        is the DELETE of a ClusterRoleBinding once the join reviewer's (bcd's, removed runs before) is gone."""
        if (
            call.method != "DELETE clusterrolebindings"
            or booked
            or kube.get_object("ClusterRoleBinding", REVIEWER_ROLE)
        ):
            return
        (node,) = await world.compute.nodes.list(world.tenant_id, pool_id=pool.id)
        await world.compute.nodes.uncordon(world.tenant_id, node.id)
        booked.append(await world.compute.reservations.create(world.tenant_id, pool.id, 8))

    del document["pools"][0]["policy"]["substrate"]
    with watch_calls(book_meanwhile):
        await world.compute.fleet.apply(document, tenant_id=world.tenant_id, prune=True)

        async def stopped_or_done() -> bool:
            current = await view(world)
            return bool(booked) and (current.state == "deleted" or "waiting for" in (current.message or ""))

        await world.until(stopped_or_done, minutes=60, what="the last teardown run after the booking")
    (reservation,) = booked
    await world.step(120)
    assert (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "active"
    assert "waiting for 1 booking(s) to end; nothing is force-released" in ((await view(world)).message or "")
    (node,) = await world.compute.nodes.list(world.tenant_id, pool_id=pool.id)
    assert node.state != "retired", "nothing is force-released"

    await world.compute.reservations.release(world.tenant_id, reservation.id)

    async def deleted() -> bool:
        return str((await view(world)).state) == "deleted"

    await world.until(deleted, minutes=30, what="the teardown finishes once the booking ended")
    assert (await world.compute.nodes.get(world.tenant_id, node.id)).state == "retired"
