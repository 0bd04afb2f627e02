"""`bcd run` under SIGTERM, as the kubelet stops a pod: the gateway session closes normally (1000)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from websockets.asyncio.server import ServerConnection, serve

from better_compute.bcd.credentials import CredentialStore, NodeCredential
from better_compute.wire.protocol import Welcome, parse_client_message


async def test_sigterm_closes_the_gateway_session_normally_and_exits_zero(tmp_path: Path) -> None:
    CredentialStore(tmp_path).save(NodeCredential("nod_1", "pol_1", "credential-of-node-one"))
    welcomed = asyncio.Event()
    closed: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()

    async def gateway(ws: ServerConnection) -> None:
        parse_client_message(await ws.recv())  # hello
        await ws.send(Welcome(node_id="nod_1", heartbeat_seconds=30).to_wire())
        welcomed.set()
        try:
            async for _ in ws:
                pass
        finally:
            if not closed.done():
                closed.set_result(ws.close_code)

    async with serve(gateway, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from better_compute.bcd.main import main; main()",
            "run",
            "--gateway-url",
            f"ws://127.0.0.1:{port}",
            "--insecure-gateway",
            "--state-dir",
            str(tmp_path),
            "--kubelet-socket",
            str(tmp_path / "kubelet.sock"),
            env={**os.environ, "BCD_SIMULATED_GPUS": "1xH100"},
            stderr=asyncio.subprocess.PIPE,
        )
        await asyncio.wait_for(welcomed.wait(), 30)
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
        code = await asyncio.wait_for(closed, 10)
    log = stderr.decode()
    assert process.returncode == 0, log
    assert code == 1000
    assert "SIGTERM received: closing the gateway session" in log
    assert "bcd stopped on SIGTERM" in log
    assert "Traceback" not in log
