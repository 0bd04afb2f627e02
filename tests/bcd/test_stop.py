"""Stopping `Bcd.run` (its task cancelled, as the kubelet stops the pod) is a stop, never a crash."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import CredentialStore, NodeCredential
from better_compute.bcd.daemon import Bcd
from better_compute.bcd.inventory import simulated_gpus
from better_compute.core.clock import SimClock
from better_compute.wire.protocol import Inventory, OsInfo


def joined_bcd(tmp_path: Path) -> Bcd:
    CredentialStore(tmp_path).save(NodeCredential("nod_1", "pol_1", "credential-of-node-one"))
    inventory = Inventory(
        os=OsInfo(hostname="n1.internal", kubernetes_node_name="n1", kernel="6.8.0", arch="x86_64"),
        gpus=simulated_gpus("1xH100", "n1"),
    )
    config = BcdConfig(
        gateway_url="ws://127.0.0.1:9", insecure=True, state_dir=tmp_path, kubelet_socket=tmp_path / "kubelet.sock"
    )
    return Bcd(config, clock=SimClock(), inventory=inventory)


async def test_a_part_failing_on_its_way_out_leaves_the_stop_a_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bcd = joined_bcd(tmp_path)
    started = asyncio.Event()

    async def session_that_fails_to_close() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ConnectionResetError("the gateway went first") from None

    bcd.agent.run = session_that_fails_to_close  # type: ignore[method-assign]
    running = asyncio.create_task(bcd.run(device_plugin=False))
    await started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert "the gateway session failed on its way out: ConnectionResetError: the gateway went first" in caplog.text


async def test_a_part_failing_on_its_own_is_raised_as_itself(tmp_path: Path) -> None:
    bcd = joined_bcd(tmp_path)

    async def session_refused() -> None:
        raise PermissionError("credential refused")

    bcd.agent.run = session_refused  # type: ignore[method-assign]
    with pytest.raises(PermissionError, match="credential refused"):
        await bcd.run(device_plugin=False)
