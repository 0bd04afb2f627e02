"""Hostile nodes: join requests and frames through the input boundary, and the caps on connections that have not
said hello. Frames drive the real session handler through Starlette's own WebSocket over plain ASGI callables."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from starlette.websockets import WebSocket

from better_compute.gateway.connection import MAX_CHECK_WAIT, serve_connection
from better_compute.gateway.handshakes import MAX_HELLO_TIMEOUT, HandshakeLimits
from better_compute.gateway.service import Gateway
from better_compute.wire.protocol import Heartbeat, Hello, JoinRequest

from .conftest import World, node_inventory


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    for router in gateway.routers():
        app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        yield http


def _join_body(token: str, hostname: str = "node-a.internal") -> dict[str, Any]:
    inventory = node_inventory("node-a").model_dump(mode="json", by_alias=True, exclude_none=True)
    inventory["os"]["hostname"] = hostname
    return {"token": token, "inventory": inventory}


async def test_a_nul_in_a_join_request_is_invalid_input_and_spends_no_use(
    world: World, gateway: Gateway, client: httpx.AsyncClient
) -> None:
    _, token = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    refused = await client.post("/v1/gateway/join", json=_join_body(token, "node\x00a"))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["path"] == "/inventory/os/hostname"
    joined = await client.post("/v1/gateway/join", json=_join_body(token))
    assert joined.status_code == 200, "the refused request did not spend the token's one use"


async def test_a_huge_join_request_is_refused_after_reading_only_its_limit(client: httpx.AsyncClient) -> None:
    pulled = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(128):  # 128 MiB if it were all read
            pulled.append(1)
            yield b" " * (1024 * 1024)

    refused = await client.post("/v1/gateway/join", content=body())
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "INVALID_INPUT"
    assert len(pulled) <= 2


class Socket:
    """One WebSocket connection as plain ASGI: delivers `frames`, then waits or disconnects."""

    def __init__(self, frames: list[str | bytes], host: str = "10.0.0.1", *, hang: bool = False) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "websocket.connect"})
        for frame in frames:
            key = "bytes" if isinstance(frame, bytes) else "text"
            self.inbox.put_nowait({"type": "websocket.receive", key: frame})
        if not hang:
            self.inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
        self.sent: list[dict[str, Any]] = []
        scope = {"type": "websocket", "path": "/v1/gateway/connect", "headers": [], "client": (host, 4000)}
        self.websocket = WebSocket(scope, self.inbox.get, self._send)

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def closed_with(self) -> int | None:
        codes = [m.get("code", 1000) for m in self.sent if m["type"] == "websocket.close"]
        return codes[0] if codes else None


async def serve(gateway: Gateway, socket: Socket) -> None:
    await serve_connection(
        socket.websocket,
        hub=gateway.hub,
        clock=gateway.clock,
        transaction=gateway.transaction,
        assignments=gateway.reservations.assignments,
        handshakes=gateway.handshakes,
    )


def _damaged(frame: str, data: st.DataObject) -> str:
    at = data.draw(st.integers(0, len(frame)))
    return frame[:at] + data.draw(st.text(max_size=4)) + frame[at + data.draw(st.integers(0, 3)) :]


FRAME_PIECES = ['"\\ud800"', '"\\u0000"', "NaN", "1e999", "9" * 40, "[" * 40 + "]" * 40, '{"type": "hello"}']


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_fuzzed_frames_close_only_their_session_and_never_raise(
    world: World, gateway: Gateway, data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    credential = data.draw(st.sampled_from(["bcn_not-a-real-credential-000000", ""]))
    hello = Hello(credential=credential or "bcn_x" * 4, inventory=node_inventory("node-f")).to_wire()
    heartbeat = Heartbeat(seq=1).to_wire()
    frame = st.one_of(
        st.sampled_from([hello, heartbeat]).map(lambda f: _damaged(f, data)),
        st.sampled_from(FRAME_PIECES).map(lambda piece: hello.replace('"node-f"', piece, 1)),
        st.text(max_size=40),
        st.binary(max_size=8),
    )
    frames = data.draw(st.lists(frame, min_size=1, max_size=3))
    socket = Socket(frames)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="better_compute.gateway"):
        await asyncio.wait_for(serve(gateway, socket), 10)
    event(f"closed {socket.closed_with()}")
    assert socket.closed_with() in (None, 1008, 1009, 4401), socket.sent
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no session failed unexpectedly"
    assert gateway.handshakes.count == 0


async def test_a_real_node_still_connects_after_hostile_frames(world: World, gateway: Gateway) -> None:
    _, token = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    joined = await gateway.join(JoinRequest(token=token, inventory=node_inventory("node-ok")))
    for frame in ['{"type": "hello", "credential": "\\ud800"}', "[" * 10_000, "\x00"]:
        await serve(gateway, Socket([frame]))
    socket = Socket([Hello(credential=joined.credential, inventory=node_inventory("node-ok")).to_wire()])
    await serve(gateway, socket)
    welcome = [m for m in socket.sent if m["type"] == "websocket.send"]
    assert json.loads(welcome[0]["text"])["type"] == "welcome"


async def test_connections_awaiting_hello_are_capped_per_client_and_in_total(world: World, gateway: Gateway) -> None:
    gateway.handshakes = HandshakeLimits(total=3, per_client=2, hello_timeout=30)
    waiting = [Socket([], "10.0.0.1", hang=True), Socket([], "10.0.0.1", hang=True)]
    tasks = [asyncio.create_task(serve(gateway, s)) for s in waiting]
    await asyncio.sleep(0.05)
    assert gateway.handshakes.count == 2
    same_client = Socket([], "10.0.0.1")
    await serve(gateway, same_client)
    assert same_client.sent == [
        {"type": "websocket.close", "code": 1013, "reason": "too many connections awaiting their hello"}
    ]
    other = Socket([], "10.0.0.2", hang=True)
    tasks.append(asyncio.create_task(serve(gateway, other)))
    await asyncio.sleep(0.05)
    third_client = Socket([], "10.0.0.3")
    await serve(gateway, third_client)
    assert third_client.closed_with() == 1013, "the total cap holds across clients"
    assert REGISTRY.get_sample_value("better_compute_gateway_unauthenticated_connections") == 3
    assert REGISTRY.get_sample_value("better_compute_gateway_unauthenticated_limit", {"scope": "per_client"}) == 2
    world.clock.advance(30)  # the hello timeout ends every one of them
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert gateway.handshakes.count == 0
    assert all(s.closed_with() == 1008 for s in [*waiting, other])


def test_the_hello_timeout_is_bounded() -> None:
    with pytest.raises(ValueError, match="at most"):
        HandshakeLimits(hello_timeout=MAX_HELLO_TIMEOUT + 1)


async def test_hellos_are_checked_a_few_at_a_time_and_a_wait_past_the_hello_timeout_says_try_again(
    world: World, gateway: Gateway
) -> None:
    """A reconnect storm's hellos wait unparsed for a turn (MAX_HELLOS_CHECKED), not all at once for the database."""
    gateway.handshakes = HandshakeLimits(hello_timeout=30, checked=1)
    _, token = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=2)
    hellos = []
    for name in ("node-t1", "node-t2"):
        joined = await gateway.join(JoinRequest(token=token, inventory=node_inventory(name)))
        hellos.append(Hello(credential=joined.credential, inventory=node_inventory(name)).to_wire())
    await gateway.handshakes.checking.acquire()  # another hello is being checked
    waiting = Socket([hellos[0]], hang=True)
    task = asyncio.create_task(serve(gateway, waiting))
    await asyncio.sleep(0.05)
    assert waiting.sent == [{"type": "websocket.accept", "subprotocol": None, "headers": []}], "no welcome yet"
    gateway.handshakes.checking.release()
    await _until(lambda: any(m["type"] == "websocket.send" for m in waiting.sent))
    assert json.loads(waiting.sent[1]["text"])["type"] == "welcome"

    await gateway.handshakes.checking.acquire()  # the first session holds no turn: this is another check
    starved = Socket([hellos[1]], hang=True)
    starved_task = asyncio.create_task(serve(gateway, starved))
    await asyncio.sleep(0.05)
    world.clock.advance(MAX_CHECK_WAIT - 1)
    await asyncio.sleep(0.05)
    assert not starved_task.done()
    world.clock.advance(1)  # before bcd's own 30 s wait for its welcome ends
    await asyncio.wait_for(starved_task, 10)
    assert starved.sent[-1] == {
        "type": "websocket.close",
        "code": 1013,
        "reason": "the gateway is busy checking other hellos; try again",
    }
    assert gateway.handshakes.count == 0, "neither counts as awaiting its hello any more"
    assert list(gateway.hub.connections) == [json.loads(waiting.sent[1]["text"])["nodeId"]]
    gateway.handshakes.checking.release()
    waiting.inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
    await asyncio.wait_for(task, 10)


async def _until(check: Any) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_session_closed_after_its_node_went_away_ends_without_raising(world: World, gateway: Gateway) -> None:
    """Starlette answers a close on a lost socket with WebSocketDisconnect; the handler never raises."""

    class Lost(Socket):
        async def _send(self, message: dict[str, Any]) -> None:
            if message["type"] == "websocket.close":
                raise OSError("the node's side is gone")
            await super()._send(message)

    socket = Lost(["not json"], hang=True)
    await asyncio.wait_for(serve(gateway, socket), 10)
    assert socket.sent == [{"type": "websocket.accept", "subprotocol": None, "headers": []}]
    assert gateway.handshakes.count == 0
