"""The gateway's lean WebSocket protocol (gateway/websocket.py): uvicorn's, holding less while idle."""

from __future__ import annotations

import asyncio
from typing import Any

from websockets.asyncio.client import connect

from better_compute.gateway.websocket import Flag, Inbox, LeanWebSocketProtocol
from better_compute.testing.loopback import LoopbackServer


async def test_the_inbox_is_first_in_first_out_and_holds_no_waiter_while_idle() -> None:
    inbox = Inbox()
    assert inbox.empty() and inbox._waiters is None
    reader = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert inbox._waiters is not None and len(inbox._waiters) == 1
    for item in ("a", "b", "c"):
        inbox.put_nowait(item)
    assert await reader == "a"
    assert [await inbox.get(), inbox.get_nowait()] == ["b", "c"]
    assert inbox.empty() and inbox._waiters is None


async def test_an_item_put_for_a_reader_that_gave_up_goes_to_the_next_reader() -> None:
    inbox = Inbox()
    first = asyncio.create_task(inbox.get())
    second = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    first.cancel()
    inbox.put_nowait("only")  # the wake-up may go to the reader that was cancelled
    assert await asyncio.wait_for(second, 5) == "only"
    assert first.cancelled()
    assert inbox.empty() and inbox._waiters is None


async def test_the_flag_waits_for_set_and_holds_no_waiter_while_idle() -> None:
    flag = Flag(initially=True)
    assert await flag.wait() is True
    flag.clear()
    waiting = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    assert not waiting.done() and not flag.is_set()
    flag.set()
    assert await waiting is True
    assert flag._waiters is None
    abandoned = asyncio.create_task(Flag().wait())
    await asyncio.sleep(0)
    abandoned.cancel()
    await asyncio.gather(abandoned, return_exceptions=True)


async def test_frames_arrive_in_order_and_the_handshake_is_let_go() -> None:
    protocols: list[Any] = []

    async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
        protocols.append(receive.__self__)
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({"type": "websocket.send", "text": message["text"]})

    frames = [f"{n}:" + "x" * (n * 997 % 70_000) for n in range(200)]
    async with (
        LoopbackServer(echo, name="echo", ws=LeanWebSocketProtocol) as server,
        connect(server.url.replace("http://", "ws://"), max_size=None) as client,
    ):
        for frame in frames:  # all sent before any is read: the server pauses reading as uvicorn does
            await client.send(frame)
        echoed = [await client.recv() for _ in frames]
        (protocol,) = protocols
        assert isinstance(protocol, LeanWebSocketProtocol)
        assert isinstance(protocol.queue, Inbox) and isinstance(protocol.writable, Flag)
        assert protocol.request is None and protocol.response is None
        assert vars(protocol) == {}, "every attribute uvicorn sets is a slot"
    assert echoed == frames
