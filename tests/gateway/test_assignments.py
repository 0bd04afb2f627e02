"""Booking reaches the kubelet: ListAndWatch changes within one assignment push, made and released."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest

from better_compute.bcd.daemon import Bcd
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.compute import compute_services
from better_compute.gateway.service import Gateway
from better_compute.testing.loopback import LoopbackServer

from .conftest import Tls, World, node_inventory, start_kubelet
from .helpers import eventually, joined_node


@contextlib.asynccontextmanager
async def running_bcd(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, directory: Path, name: str
) -> AsyncIterator[Bcd]:
    config, _ = await joined_node(world, gateway, server, tls, directory, name)
    kubelet, kubelet_server = await start_kubelet(config.kubelet_socket)
    bcd = Bcd(config, clock=world.clock, inventory=node_inventory(name))
    task = asyncio.create_task(bcd.run())
    try:
        await asyncio.wait_for(bcd.agent.connected.wait(), 10)
        await eventually(lambda: len(kubelet.requests) == 1)
        yield bcd
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kubelet_server.stop(grace=None)


async def uuids_of(world: World, reservation_device_ids: Sequence[str], node_id: str) -> list[str]:
    node = await world.compute.nodes.get(world.tenant_id, node_id)
    return [d.uuid for d in node.devices if d.id in reservation_device_ids]


async def test_list_and_watch_changes_within_one_push_when_a_reservation_is_made_and_released(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, socket_dir: Path
) -> None:
    async with running_bcd(world, gateway, server, tls, socket_dir, "node-a") as bcd:
        node_id = bcd.agent.credential.node_id
        connection = gateway.hub.connections[node_id]
        await eventually(lambda: connection.pushes >= 1)  # the assignment sent on connect
        assert "headers" not in connection.websocket.scope, "the upgrade's headers are not held while connected"
        async with grpc.aio.insecure_channel(f"unix://{bcd.plugin.socket}") as channel:
            stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
            assert list((await stream.read()).devices) == []

            before = connection.pushes
            reservation = await world.compute.reservations.create(world.tenant_id, world.pool_id, 2)
            update = await asyncio.wait_for(stream.read(), 10)
            assert connection.pushes == before + 1
            assert sorted(d.ID for d in update.devices) == sorted(
                await uuids_of(world, reservation.device_ids, node_id)
            )

            refused = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=[bcd.inventory.gpus[7].uuid])]
            )
            with pytest.raises(grpc.aio.AioRpcError) as not_held:
                await pb_grpc.DevicePluginStub(channel).Allocate(refused)
            assert not_held.value.code() == grpc.StatusCode.FAILED_PRECONDITION

            before = connection.pushes
            await world.compute.reservations.release(world.tenant_id, reservation.id)
            update = await asyncio.wait_for(stream.read(), 10)
            assert connection.pushes == before + 1
            assert list(update.devices) == []
            stream.cancel()


async def test_a_reservation_made_on_another_replica_is_pushed_through_listen_notify(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, socket_dir: Path
) -> None:
    if not world.db.is_postgres:
        pytest.skip("replicas share a database only on PostgreSQL; SQLite is one process (in-process push)")
    other_compute = compute_services(world.db, world.clock)  # another replica: its own change feed
    other = Gateway(world.db, world.clock, other_compute.reservations, replica="replica-b")
    await gateway.start()
    await other.start()
    try:
        async with running_bcd(world, gateway, server, tls, socket_dir, "node-a") as bcd:
            connection = gateway.hub.connections[bcd.agent.credential.node_id]
            await eventually(lambda: connection.pushes >= 1)
            async with grpc.aio.insecure_channel(f"unix://{bcd.plugin.socket}") as channel:
                stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
                assert list((await stream.read()).devices) == []
                reservation = await other_compute.reservations.create(world.tenant_id, world.pool_id, 3)
                update = await asyncio.wait_for(stream.read(), 10)
                assert len(update.devices) == 3 == len(reservation.device_ids)
                stream.cancel()
    finally:
        await other.close()
        await gateway.close()
