"""Serve an ASGI app on a loopback port, inside the running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from typing import Any

import uvicorn

from better_compute.testing.lifecycle import StartStop

__all__ = ["LoopbackServer"]


class _Server(uvicorn.Server):
    """uvicorn's server, whose main loop ends as soon as `stop` asks rather than at its next 0.1 s tick.

    Each test's emulators stop in two rounds (testing/cloud.py), so the ticks cost a test up to 0.2 s.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.exit_now = asyncio.Event()

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):  # on_tick still runs every 0.1 s: it keeps the Date header current
                await asyncio.wait_for(self.exit_now.wait(), 0.1)
            should_exit = await self.on_tick(counter)


class LoopbackServer(StartStop):
    """An ASGI app on 127.0.0.1 with a free port, over HTTP or HTTPS.

    `async with LoopbackServer(app) as server:` starts it; `server.url` is its base
    URL. It runs as a task of the current loop, so the emulators share the test's
    clock and state without threads.
    """

    def __init__(
        self,
        app: Any,
        *,
        certfile: str | None = None,
        keyfile: str | None = None,
        name: str = "emulator",
        ws: Any = "websockets-sansio",
    ) -> None:
        self.app = app
        self.name = name
        self._ws = ws
        """uvicorn's `ws` setting: a protocol's name, or its class (the gateway's is gateway.websocket's)."""
        self._certfile = certfile
        self._keyfile = keyfile
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when the
        # listening socket says TCP; without it every response waits ~40 ms (Nagle + delayed ACK).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        scheme = "https" if certfile else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            ssl_certfile=self._certfile,
            ssl_keyfile=self._keyfile,
            ssl_cert_reqs=ssl.CERT_NONE,
            ws=self._ws,
            timeout_keep_alive=30,
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]), name=f"loopback:{self.name}")
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.exit_now.set()
            try:
                await asyncio.wait_for(self._task, timeout=5)
            except TimeoutError:
                self._task.cancel()
            self._server = None
            self._task = None
        self._sock.close()
