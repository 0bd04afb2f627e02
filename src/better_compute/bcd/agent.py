"""`bcd run`'s connection to the node gateway: pinned TLS, hello, heartbeats, assignments.

One session: open the WebSocket over TLS, check the gateway certificate's SPKI against
the pins (before anything secret is sent), send `hello` with the node credential and the
inventory, then send a heartbeat every interval the gateway's `welcome` names while
applying each pushed assignment to the NodeState the device plugin reads. When a session
ends for any reason but a refused credential, the agent reconnects after a jittered
backoff on its clock. A refused credential is final: the node must join again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl

import pydantic
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import NodeCredential
from better_compute.bcd.pins import PinMismatchError, check_pins, tls_context
from better_compute.bcd.state import NodeState
from better_compute.core.backoff import Backoff
from better_compute.core.clock import Clock
from better_compute.wire.protocol import (
    CONNECT_PATH,
    MAX_MESSAGE_BYTES,
    AssignmentMessage,
    Heartbeat,
    Hello,
    Inventory,
    InventoryUpdate,
    Welcome,
    parse_server_message,
)

__all__ = ["Agent", "CredentialRefusedError", "GatewayConfigError", "SessionEnded"]

log = logging.getLogger(__name__)

CLOSE_CREDENTIAL_REFUSED = 4401
OPEN_TIMEOUT_SECONDS = 15.0
WELCOME_TIMEOUT_SECONDS = 30.0
RECONNECT = Backoff("reconnect", first=1.0, factor=2.0, cap=60.0)
"""Between half and all of 1, 2, 4 ... 60 s after each session that ended."""


class CredentialRefusedError(Exception):
    """The gateway refused the node credential: the node was retired or joined again elsewhere."""


class GatewayConfigError(Exception):
    """The gateway settings cannot work (no URL, plain ws:// without --insecure-gateway)."""


class SessionEnded(Exception):
    """A session ended; the message says how (closed, malformed message, timeout)."""


class Agent:
    """Keeps one node connected to the gateway."""

    def __init__(
        self,
        config: BcdConfig,
        credential: NodeCredential,
        inventory: Inventory,
        state: NodeState,
        *,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        if not config.gateway_url:
            raise GatewayConfigError("no gateway URL: set BCD_GATEWAY_URL or --gateway-url")
        url = config.gateway_url.rstrip("/")
        if not url.endswith(CONNECT_PATH):
            url += CONNECT_PATH
        if url.startswith("ws://") and not config.insecure:
            raise GatewayConfigError(f"{url} is not TLS; use wss:// (or --insecure-gateway for local development)")
        if not url.startswith(("ws://", "wss://")):
            raise GatewayConfigError(f"gateway URL {url} must start with wss://")
        self.url = url
        self.config = config
        self.credential = credential
        self.inventory = inventory
        self.state = state
        self.clock = clock
        self.rng = rng or random.Random()
        self.failures = 0
        """Sessions that ended since the last welcome: the reconnect's place in RECONNECT."""
        self.sessions = 0
        self.connected = asyncio.Event()
        self.heartbeating = asyncio.Event()  # this session's heartbeat loop is waiting for its first beat
        self.websocket: ClientConnection | None = None
        self._ssl: ssl.SSLContext | None = (
            tls_context(config.pins, config.ca_file) if url.startswith("wss://") else None
        )

    async def report(self, inventory: Inventory) -> None:
        """A changed inventory: sent now if connected, and in every later hello."""
        self.inventory = inventory
        websocket = self.websocket
        if websocket is not None and self.connected.is_set():
            with contextlib.suppress(ConnectionClosed):  # else the next session's hello carries it
                await websocket.send(InventoryUpdate(inventory=inventory).to_wire())

    async def run(self) -> None:
        """Connect and stay connected until cancelled; raises CredentialRefusedError."""
        while True:
            try:
                await self.session()
                problem = "the gateway closed the session"
            except (CredentialRefusedError, GatewayConfigError):
                raise
            except PinMismatchError as exc:
                problem = str(exc)
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake, InvalidURI, SessionEnded) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            self.failures += 1
            delay = RECONNECT.jittered(self.failures, self.rng)
            log.warning("gateway session ended (%s); reconnecting in %.1f s", problem, delay)
            await self.clock.sleep(delay)

    async def session(self) -> None:
        """One session, from connect to close."""
        # No permessage-deflate: the messages are small, and each compressed connection costs
        # both ends a zlib window (about 45 KiB on the gateway).
        async with connect(
            self.url,
            ssl=self._ssl,
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=OPEN_TIMEOUT_SECONDS,
            compression=None,
        ) as ws:
            self.websocket = ws
            try:
                await self._serve(ws)
            except asyncio.CancelledError:
                # Stopping (SIGTERM): a normal closure, not the 1011 the context manager sends on an exception.
                await ws.close(1000, "bcd is stopping")
                raise
            finally:
                self.connected.clear()
                self.heartbeating.clear()
                self.websocket = None

    async def _serve(self, ws: ClientConnection) -> None:
        if self._ssl is not None and self.config.pins:
            ssl_object = ws.transport.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            check_pins(certificate, self.config.pins, where=self.url)
        await ws.send(Hello(credential=self.credential.credential, inventory=self.inventory).to_wire())
        welcome = await self._welcome(ws)
        self.sessions += 1
        self.failures = 0
        self.connected.set()
        log.info("connected to %s as node %s", self.url, welcome.node_id)
        heartbeats = asyncio.create_task(self._heartbeats(ws, welcome.heartbeat_seconds), name="bcd:heartbeats")
        try:
            await self._receive(ws)
        finally:
            heartbeats.cancel()
            await asyncio.gather(heartbeats, return_exceptions=True)

    async def _next(self, ws: ClientConnection) -> Welcome | AssignmentMessage:
        try:
            data = await ws.recv()
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == CLOSE_CREDENTIAL_REFUSED:
                raise CredentialRefusedError(
                    f"the gateway refused this node's credential ({exc.rcvd.reason}); the node must join again: "
                    f"remove {self.config.state_dir}/node-credential.json and give bcd join a new token"
                ) from exc
            raise
        try:
            return parse_server_message(data)
        except (ValueError, pydantic.ValidationError) as exc:
            await ws.close(1008, "malformed message")
            raise SessionEnded(f"the gateway sent a malformed message: {exc}") from exc

    async def _welcome(self, ws: ClientConnection) -> Welcome:
        async with asyncio.timeout(WELCOME_TIMEOUT_SECONDS):
            message = await self._next(ws)
        if not isinstance(message, Welcome):
            await ws.close(1008, "expected welcome")
            raise SessionEnded(f"the gateway sent {message.type!r} before welcome")
        return message

    async def _receive(self, ws: ClientConnection) -> None:
        while True:
            message = await self._next(ws)
            if isinstance(message, AssignmentMessage):
                assignment = message.assignment
                changed = await self.state.apply(assignment)
                log.info(
                    "assignment: %d reservation(s), %d held device(s)%s%s",
                    len(assignment.reservations),
                    len(self.state.held()),
                    ", cordoned" if assignment.cordoned else "",
                    "" if changed else " (unchanged)",
                )

    async def _heartbeats(self, ws: ClientConnection, interval: float) -> None:
        seq = 0
        self.heartbeating.set()
        while True:
            await self.clock.sleep(interval)
            seq += 1
            await ws.send(Heartbeat(seq=seq, unhealthy_gpus=sorted(self.state.unhealthy())).to_wire())
