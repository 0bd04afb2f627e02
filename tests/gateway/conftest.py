"""A gateway over a small compute world, served over TLS on loopback, and bcd configs for it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from fastapi import FastAPI

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.inventory import simulated_gpus
from better_compute.bcd.pins import spki_pin
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.compute import ComputeServices, compute_services
from better_compute.core.clock import SimClock
from better_compute.gateway.service import Gateway
from better_compute.gateway.websocket import LeanWebSocketProtocol
from better_compute.iam import Iam
from better_compute.store import Database
from better_compute.testing.loopback import LoopbackServer
from better_compute.wire.protocol import Inventory, OsInfo


@dataclass
class World:
    db: Database
    clock: SimClock
    compute: ComputeServices
    tenant_id: str
    pool_id: str


@pytest.fixture
async def world(database: Database, clock: SimClock) -> World:
    tenant = await Iam(database, clock).create_tenant("acme")
    compute = compute_services(database, clock)
    site = await compute.sites.create(tenant.id, "k8s", "shared", "us-east-1")
    pool = await compute.pools.create(tenant.id, "gpu-fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
    return World(database, clock, compute, tenant.id, pool.id)


@pytest.fixture
async def gateway(world: World) -> AsyncIterator[Gateway]:
    gw = Gateway(world.db, world.clock, world.compute.reservations, heartbeat_seconds=10.0, missed_heartbeats=3)
    yield gw
    await gw.close()


@dataclass
class Tls:
    ca_file: Path
    cert_file: Path
    pin: str


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file = directory / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return Tls(ca_file=ca_file, cert_file=cert_file, pin=spki_pin(cert.cert_chain_pems[0].bytes()))


@pytest.fixture
async def server(gateway: Gateway, tls: Tls) -> AsyncIterator[LoopbackServer]:
    app = FastAPI()
    for router in gateway.routers():
        app.include_router(router)
    async with LoopbackServer(
        app, certfile=str(tls.cert_file), keyfile=str(tls.cert_file), name="gateway", ws=LeanWebSocketProtocol
    ) as srv:
        yield srv
    for connection in list(gateway.hub.connections.values()):
        await connection.close(1001, "test over")


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short path: unix socket paths are limited to about 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="bcgw-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def node_config(
    server: LoopbackServer, tls: Tls, directory: Path, name: str, *, pins: tuple[str, ...] = ()
) -> BcdConfig:
    """What the DaemonSet gives bcd on node `name`: URLs, pins, its own volume and kubelet socket."""
    (directory / name).mkdir(parents=True, exist_ok=True)
    return BcdConfig(
        control_plane_url=server.url,
        gateway_url=server.url.replace("https://", "wss://"),
        pins=pins or (tls.pin,),
        token_file=directory / name / "token",
        state_dir=directory / name / "state",
        kubelet_socket=directory / name / "kubelet.sock",
        ca_file=tls.ca_file,
    )


def node_inventory(name: str, gpus: int = 8) -> Inventory:
    return Inventory(
        os=OsInfo(hostname=f"{name}.internal", kubernetes_node_name=name, kernel="6.8.0", arch="x86_64"),
        gpus=simulated_gpus(f"{gpus}xH100", name),
    )


class FakeKubelet(pb_grpc.RegistrationServicer):
    """The kubelet's side of registration: records every RegisterRequest."""

    def __init__(self) -> None:
        self.requests: list[pb.RegisterRequest] = []

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        self.requests.append(request)
        return pb.Empty()


async def start_kubelet(path: Path) -> tuple[FakeKubelet, grpc.aio.Server]:
    fake = FakeKubelet()
    server = grpc.aio.server()
    pb_grpc.add_RegistrationServicer_to_server(fake, server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return fake, server
