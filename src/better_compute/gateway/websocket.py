"""uvicorn's WebSocket protocol (websockets' sans-I/O one), with less held per open socket.

A connected node's WebSocket stays open for as long as the node runs, and what uvicorn's
protocol keeps for it while nothing happens is most of the gateway's memory per node
beyond TLS (bench/gateway.py): an `asyncio.Queue` for the frames received (three deques of
760 bytes each, however empty), an `asyncio.Event` for the transport being writable (one
more), and the parsed upgrade request and the response to it, kept after the handshake
though nothing reads them again. `LeanWebSocketProtocol` is the same protocol with an
inbox and a flag that hold nothing while idle, `receive` awaiting the inbox directly
(one coroutine less per socket), and the handshake's request and response let go once the
response is written. Frames, flow control, pings and closes are uvicorn's, unchanged.

`better-compute serve` runs every WebSocket through it (the node gateway's is the only one),
where uvicorn has the sans-I/O protocol (0.35 and later); it replaces uvicorn's queue and
event only where they are the asyncio types it was written against.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["Flag", "Inbox", "LeanWebSocketProtocol"]


class Inbox:
    """A first-in first-out queue without a bound, for one reader: what `asyncio.Queue` does for
    uvicorn's protocol, with a list and, only while a reader waits, a future."""

    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._waiters: list[asyncio.Future[None]] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        self._wake()

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def get_nowait(self) -> Any:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.pop(0)

    def arrival(self) -> asyncio.Future[None]:
        """A future done once an item is (or was) put: await it while `empty()`."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._items:
            waiter.set_result(None)
            return waiter
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        waiter.add_done_callback(self._forget)
        return waiter

    async def get(self) -> Any:
        while not self._items:
            await self.arrival()
        return self._items.pop(0)

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                break
        if not waiters:
            self._waiters = None

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        waiters = self._waiters
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                self._waiters = None
        if waiter.cancelled() and self._items:  # a reader that gave up: the next one gets the item
            self._wake()


class Flag:
    """`asyncio.Event`'s set, clear, is_set and wait, holding a list of waiters only while one waits."""

    __slots__ = ("_set", "_waiters")

    def __init__(self, *, initially: bool = False) -> None:
        self._set = initially
        self._waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            return await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)
                if not self._waiters:
                    self._waiters = None


class LeanWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's `websockets-sansio` protocol, holding less while a socket is idle (see above).

    What it replaces it replaces only where uvicorn built what it was written against (an
    `asyncio.Queue` and an `asyncio.Event`); otherwise it is uvicorn's protocol unchanged.
    The attributes uvicorn sets are slots here: 37 of them took a 1.6 KiB dict per socket
    (an attribute a later uvicorn adds goes to the instance's dict, as before)."""

    __slots__ = (
        "app",
        "app_state",
        "asgi_version",
        "client",
        "close_sent",
        "close_timeout",
        "close_timer",
        "config",
        "conn",
        "connections",
        "curr_msg_data_type",
        "default_headers",
        "disconnected",
        "frames",
        "handshake_complete",
        "handshake_initiated",
        "initial_response",
        "last_ping_rtt",
        "logger",
        "loop",
        "pending_ping_payload",
        "ping_interval",
        "ping_sent_at",
        "ping_timeout",
        "ping_timer",
        "pong_timer",
        "queue",
        "read_paused",
        "request",
        "response",
        "root_path",
        "scheme",
        "scope",
        "server",
        "tasks",
        "transport",
        "writable",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if type(self.queue) is asyncio.Queue and type(self.writable) is asyncio.Event:
            self.queue = Inbox()  # type: ignore[assignment]
            self.writable = Flag(initially=self.writable.is_set())  # type: ignore[assignment]

    async def send(self, message: Any) -> None:
        await super().send(message)
        if self.handshake_complete and getattr(self, "request", None) is not None:
            # The upgrade is answered: nothing reads the request or the response again.
            self.request = self.response = None  # type: ignore[assignment]

    async def receive(self) -> Any:
        inbox = self.queue
        if not isinstance(inbox, Inbox):
            return await super().receive()
        while inbox.empty():
            await inbox.arrival()  # a future, not one more coroutine: it stays as long as the socket is idle
        message = inbox.get_nowait()
        if self.read_paused and inbox.empty():
            self.read_paused = False
            self.transport.resume_reading()
        return message
