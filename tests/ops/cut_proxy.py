"""A TCP proxy on 127.0.0.1 that a test controls: it forwards to PostgreSQL and cuts live
connections on demand, the way a network or a restarting server would.

    async with CutProxy(5432) as proxy:   # proxy.port listens on 127.0.0.1
        proxy.cut_after(2)                # the 3rd message any client sends from now on is never delivered:
                                          # every connection is reset with that message in flight
        proxy.disarm()                    # or let everything through again
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["CutProxy"]


class CutProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cuts = 0
        self._armed: int | None = None
        self._server: asyncio.Server | None = None
        self._live: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> CutProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        assert self._server is not None
        self._server.close()
        self.cut_now()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def cut_after(self, messages: int) -> None:
        """Let `messages` more client messages through, then drop the next one and reset every connection."""
        self._armed = messages

    def disarm(self) -> None:
        self._armed = None

    def cut_now(self) -> None:
        """Reset every live connection (both sides see a TCP RST)."""
        self._armed = None
        self.cuts += 1
        for writer in list(self._live):
            writer.transport.abort()
        self._live.clear()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        self._live |= {client_writer, server_writer}
        up = asyncio.create_task(self._pump(client_reader, server_writer, from_client=True))
        down = asyncio.create_task(self._pump(server_reader, client_writer, from_client=False))
        self._tasks |= {up, down}
        await asyncio.gather(up, down, return_exceptions=True)
        self._tasks -= {up, down}
        for writer in (client_writer, server_writer):
            self._live.discard(writer)
            writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, from_client: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(65536):
                if from_client and self._armed is not None:
                    if self._armed == 0:
                        self.cut_now()
                        return
                    self._armed -= 1
                writer.write(chunk)
                await writer.drain()
        writer.transport.abort()
