"""LoopbackServer: `stop` ends uvicorn's main loop when asked, not at its next 0.1 s tick."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from better_compute.testing import LoopbackServer


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


async def test_stop_ends_the_main_loop_without_waiting_for_its_tick() -> None:
    server = LoopbackServer(hello)
    await server.start()
    async with httpx.AsyncClient() as client:
        answer = await client.get(server.url)
        assert answer.text == "hello" and "date" in answer.headers  # on_tick still keeps the Date header
    uvicorn_server = server._server
    assert uvicorn_server is not None
    (listening,) = uvicorn_server.servers
    stopping = asyncio.ensure_future(server.stop())
    for _ in range(50):  # a few turns of the loop, no real time: a main loop asleep on its tick stays there
        if not listening.is_serving():
            break
        await asyncio.sleep(0)
    assert not listening.is_serving(), "the server was still accepting connections after being told to stop"
    await stopping
