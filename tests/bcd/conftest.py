"""Fixtures for bcd: a short socket directory and a fake kubelet Registration server."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short path: unix socket paths are limited to about 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="bcd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class FakeKubelet(pb_grpc.RegistrationServicer):
    """The kubelet's side of registration: records every RegisterRequest."""

    def __init__(self) -> None:
        self.requests: list[pb.RegisterRequest] = []

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        self.requests.append(request)
        return pb.Empty()


@pytest.fixture
async def kubelet(socket_dir: Path) -> AsyncIterator[tuple[FakeKubelet, Path]]:
    fake = FakeKubelet()
    server = grpc.aio.server()
    pb_grpc.add_RegistrationServicer_to_server(fake, server)
    path = socket_dir / "kubelet.sock"
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    yield fake, path
    await server.stop(grace=None)
