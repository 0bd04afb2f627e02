"""One node's WebSocket session, from hello to close.

    counted (handshakes.py: refused before accept past a cap) -> accept -> hello (within the
    hello timeout, credential checked) -> session opened in the database -> welcome +
    current assignment -> heartbeats / inventory until the socket ends

Every frame is size-checked and validated. A malformed, oversized or unexpected message
closes that session with a logged reason (1008 policy violation, 1009 too big); a refused
credential closes with 4401, after which bcd stops and asks for a new join. Nothing a node
sends can raise out of this handler.

An inventory update is written only while the session may go on (`ended_sessions`, with
the session row locked): a session replaced, revoked or swept ends instead of rewriting
the node's inventory.
"""

from __future__ import annotations

import logging

import pydantic
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from better_compute.compute.reservations import report_inventory
from better_compute.core.clock import Clock, Elapsed, within
from better_compute.core.errors import ComputeError, ErrorCode, escaped
from better_compute.core.ids import new_id
from better_compute.gateway.handshakes import HandshakeLimits
from better_compute.gateway.hub import (
    CLOSE_CREDENTIAL_REFUSED,
    CLOSE_REPLACED,
    AssignmentSource,
    Hub,
    NodeConnection,
    TransactionFactory,
    close_code,
)
from better_compute.gateway.joining import FirstSession, authenticate_node
from better_compute.gateway.sessions import REPLACED, close_session, ended_sessions, open_session
from better_compute.wire.protocol import (
    MAX_MESSAGE_BYTES,
    Heartbeat,
    Hello,
    InventoryUpdate,
    Welcome,
    parse_client_message,
)

__all__ = ["CLOSE_CREDENTIAL_REFUSED", "CLOSE_REPLACED", "SessionClosed", "serve_connection"]

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN = 1013


MAX_CHECK_WAIT = 20.0
"""The longest a hello waits for its turn to be checked, in seconds: bcd gives up on a welcome
after 30 s, and a 1013 before then tells it to come back later rather than time out."""

_UPGRADE_ONLY = ("headers", "subprotocols", "extensions")
"""What of the ASGI scope only the upgrade reads: the request's headers (about 1.2 KiB a node)
and the subprotocols and extensions offered. The session reads the client's address only."""

MAX_CLOSE_REASON_BYTES = 123
"""A WebSocket close frame's reason is UTF-8 text of at most 123 bytes (RFC 6455 section 5.5.1)."""


def close_reason(text: str) -> str:
    """`text` as a reason a close frame can carry: surrogates escaped, cut at a character
    boundary within MAX_CLOSE_REASON_BYTES; a reason that broke either rule would drop the
    close frame and leave the node without its close code."""
    encoded = escaped(text).encode("utf-8")[:MAX_CLOSE_REASON_BYTES]
    return encoded.decode("utf-8", "ignore")


class SessionClosed(Exception):
    """The session ends: `code` and `reason` are what the gateway closes it with."""

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = close_reason(reason)
        super().__init__(self.reason)


class _Gone(Exception):
    """The node's side of the socket went away."""


async def _receive_text(websocket: WebSocket) -> str:
    """The next text frame, size-checked, not yet parsed."""
    return _text(await websocket.receive())


def _text(message: Message) -> str:
    """A received message's text, size-checked; the session ends on anything else."""
    if message["type"] == "websocket.disconnect":
        raise _Gone(f"connection closed ({message.get('code', 1006)})")
    data: str | None = message.get("text")
    if data is None:
        raise SessionClosed(CLOSE_POLICY, "binary frames are not part of the protocol")
    if len(data.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise SessionClosed(CLOSE_TOO_BIG, f"message over {MAX_MESSAGE_BYTES} bytes")
    return data


def _parse(data: str) -> Hello | Heartbeat | InventoryUpdate:
    try:
        return parse_client_message(data)
    except ComputeError as exc:  # the input boundary: not JSON, NUL, a lone surrogate, too deep, ...
        said = f"{exc.problems[0].path}: {exc.problems[0].message}" if exc.problems else exc.message
        raise SessionClosed(CLOSE_POLICY, f"malformed message: {said}") from exc
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = "/".join(str(p) for p in first["loc"])
        raise SessionClosed(CLOSE_POLICY, f"malformed message: {where}: {first['msg']}") from exc
    except ValueError as exc:
        raise SessionClosed(CLOSE_POLICY, f"malformed message: {exc}") from exc


async def _open(
    websocket: WebSocket,
    *,
    hub: Hub,
    clock: Clock,
    transaction: TransactionFactory,
    handshakes: HandshakeLimits,
    first_session: FirstSession | None,
) -> NodeConnection:
    """Hello, credential, session row: the attached connection, holding nothing of the hello.

    The hello is checked once one of MAX_HELLOS_CHECKED turns is free (handshakes.checking),
    waited for at most MAX_CHECK_WAIT (or the hello timeout, if shorter). A node's first session runs `first_session` in
    the same transaction."""
    timeout = handshakes.hello_timeout
    try:
        data = await within(clock, timeout, _receive_text(websocket))
    except Elapsed:
        raise SessionClosed(CLOSE_POLICY, f"no hello within {timeout:.0f} s") from None
    try:
        await within(clock, min(timeout, MAX_CHECK_WAIT), handshakes.checking.acquire())
    except Elapsed:
        raise SessionClosed(CLOSE_TRY_AGAIN, "the gateway is busy checking other hellos; try again") from None
    try:
        return await _check_hello(
            websocket, _parse(data), hub=hub, clock=clock, transaction=transaction, first_session=first_session
        )
    finally:
        handshakes.checking.release()


async def _check_hello(
    websocket: WebSocket,
    hello: Hello | Heartbeat | InventoryUpdate,
    *,
    hub: Hub,
    clock: Clock,
    transaction: TransactionFactory,
    first_session: FirstSession | None,
) -> NodeConnection:
    if not isinstance(hello, Hello):
        raise SessionClosed(CLOSE_POLICY, f"expected hello, got {hello.type}")
    inventory = hello.inventory.model_dump(mode="json", by_alias=True, exclude_none=True)
    try:
        async with transaction() as session:
            node = await authenticate_node(session, hello.credential)
            session_id = new_id("nss")
            # The session row before compute's node row, the order every gateway write takes locks in.
            opened_at = await hub.db_clock.now(session)
            first = await open_session(
                session, node_id=node.id, session_id=session_id, replica=hub.replica, now=opened_at
            )
            if first and first_session is not None:
                await first_session(session, pool_id=node.pool_id, node_name=node.name, now=clock.now())
            if inventory != node.inventory:  # a reconnect storm mostly brings inventories already on record
                await report_inventory(session, node.id, inventory, clock.now())
    except ComputeError as exc:
        code = CLOSE_CREDENTIAL_REFUSED if exc.code == ErrorCode.PERMISSION_DENIED else CLOSE_POLICY
        raise SessionClosed(code, exc.message) from exc
    connection = NodeConnection(websocket, node_id=node.id, session_id=session_id, now=clock.now())
    replaced = hub.attach(connection)
    if replaced is not None:
        await replaced.close(CLOSE_REPLACED, REPLACED)
    return connection


async def serve_connection(
    websocket: WebSocket,
    *,
    hub: Hub,
    clock: Clock,
    transaction: TransactionFactory,
    assignments: AssignmentSource,
    handshakes: HandshakeLimits,
    first_session: FirstSession | None = None,
) -> None:
    """Serve one node's session until it ends; never raises."""
    host = websocket.client.host if websocket.client else "unknown"
    cap = handshakes.enter(host)
    if cap is not None:
        log.warning("refused a connection from %s: too many connections awaiting their hello (%s)", host, cap)
        await websocket.close(CLOSE_TRY_AGAIN, "too many connections awaiting their hello")
        return
    peer = f"{host}:{websocket.client.port}" if websocket.client else "unknown peer"
    connection: NodeConnection | None = None
    try:
        try:
            await websocket.accept()
            for key in _UPGRADE_ONLY:  # held for as long as the node stays, and never read again
                websocket.scope.pop(key, None)
            connection = await _open(
                websocket,
                hub=hub,
                clock=clock,
                transaction=transaction,
                handshakes=handshakes,
                first_session=first_session,
            )
        finally:
            handshakes.leave(host)
        node_id = connection.node_id
        await connection.send(Welcome(node_id=node_id, heartbeat_seconds=hub.heartbeat_seconds).to_wire())
        hub.start_pushing(connection, assignments)
        log.info("node %s connected from %s (session %s)", node_id, peer, connection.session_id)
        while True:
            # Awaited here, not in a helper: this wait lasts as long as the node stays, and each
            # coroutine it is awaited through stays in memory with it.
            message = _parse(_text(await websocket.receive()))
            if isinstance(message, Heartbeat):
                hub.heartbeat(connection)
            elif isinstance(message, InventoryUpdate):
                async with transaction() as session:
                    ended = await ended_sessions(session, {node_id: connection.session_id}, lock=True)
                    if node_id in ended:
                        raise SessionClosed(close_code(ended[node_id]), ended[node_id].reason)
                    await report_inventory(
                        session,
                        node_id,
                        message.inventory.model_dump(mode="json", by_alias=True, exclude_none=True),
                        clock.now(),
                    )
            else:
                raise SessionClosed(CLOSE_POLICY, "hello is sent once, first")
            del message
    except SessionClosed as closed:
        who = connection.node_id if connection else peer
        log.warning("closing the session of %s: %s", who, closed.reason)
        if websocket.client_state == WebSocketState.CONNECTED:
            await _close(websocket, closed.code, closed.reason)
        reason = closed.reason
    except _Gone as gone:
        reason = str(gone)
    except WebSocketDisconnect as gone:  # the node went away while the gateway was sending
        reason = f"connection closed ({gone.code})"
    except Exception:  # a failure here (the database, a bug) ends this session only, never the server
        log.exception("gateway session of %s failed", connection.node_id if connection else peer)
        await _close(websocket, 1011, "internal error")
        reason = "internal error"
    finally:
        if connection is not None:
            await hub.stop_pushing(connection)
    if connection is not None:
        hub.detach(connection)
        try:
            async with transaction() as session:
                if await close_session(
                    session,
                    node_id=connection.node_id,
                    session_id=connection.session_id,
                    now=await hub.db_clock.now(session),
                    reason=reason,
                ):
                    log.info("node %s disconnected: %s", connection.node_id, reason)
        except Exception:
            log.exception("could not record that node %s disconnected; the stale sweep will", connection.node_id)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    if websocket.client_state == WebSocketState.CONNECTED:
        try:
            await websocket.close(code, reason)
        except (RuntimeError, OSError, WebSocketDisconnect):  # Starlette: a socket lost at the last moment
            log.debug("the socket was already gone while closing it")
