"""This replica's live node connections: assignment pushes, heartbeat batches, the stale sweep.

When compute says nodes' assignments changed (after commit), the hub pushes to those of
them connected here and, on PostgreSQL, broadcasts the ids with NOTIFY so that the
replica holding each node's connection pushes too (every replica LISTENs; on SQLite there
is one process and the local push is the whole story). A connection's pushes run in one
short task at a time, which always sends the newest assignment, so pushes never arrive out
of order; between pushes a connection holds no task (a thousand idle pushers cost the
gateway about 2.5 KiB a node, bench/gateway.py).

Every `heartbeat_seconds` on the clock, `tick` writes the heartbeats seen since the last
tick in one transaction (one statement for the sessions; compute's `last_seen_at` about
once a minute per node), closes local connections silent for `missed_heartbeats`
intervals, and marks disconnected any session, on any replica, whose heartbeats stopped
(a replica that died cannot do it for itself). Heartbeats are stamped, and staleness
judged, on the database's clock: a beat's age on this replica's clock is taken from the
database's time at the flush, so a replica whose clock is off cannot sweep a live session.

Before each push and at every tick the hub asks the database whether each of its
sessions may go on (`ended_sessions`): a node retired, a credential replaced by a new
join or a newer session opened on another replica ends it, and the socket is closed at
once; a session some other replica swept as stale is closed too, so that bcd reconnects
rather than stay connected to a replica the database calls disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from better_compute.compute.models import Assignment as ComputeAssignment
from better_compute.core.clock import Clock
from better_compute.gateway.memory import RELEASE_AFTER_SESSIONS, release_free_memory
from better_compute.gateway.sessions import SessionEnd, close_session, ended_sessions, record_heartbeats, sweep_stale
from better_compute.store import Database
from better_compute.store.clock import DatabaseClock, database_clock
from better_compute.wire.protocol import Assignment, AssignmentMessage, ReservationDevices

__all__ = [
    "CHANNEL",
    "CLOSE_CREDENTIAL_REFUSED",
    "CLOSE_HEARTBEATS_MISSED",
    "CLOSE_REPLACED",
    "Hub",
    "NodeConnection",
    "close_code",
    "to_wire_assignment",
]

log = logging.getLogger(__name__)

CHANNEL = "bc_gateway_assignments"
CLOSE_CREDENTIAL_REFUSED = 4401
"""bcd stops and asks for a new join."""
CLOSE_HEARTBEATS_MISSED = 4408
CLOSE_REPLACED = 4409
LAST_SEEN_SECONDS = 60.0
"""How often a connected node's `last_seen_at` in compute is brought up to date (its session's, every tick)."""
_PAYLOAD_LIMIT = 7000  # NOTIFY payloads must stay under 8000 bytes

AssignmentSource = Callable[[str], Awaitable[ComputeAssignment]]
TransactionFactory = Callable[[], AbstractAsyncContextManager[AsyncSession]]
SessionCheck = Callable[["NodeConnection"], Awaitable[SessionEnd | None]]

_CLOSE_CODES = {"replaced": CLOSE_REPLACED, "revoked": CLOSE_CREDENTIAL_REFUSED, "stale": CLOSE_HEARTBEATS_MISSED}


def close_code(end: SessionEnd) -> int:
    """The WebSocket close code that tells bcd what to do: join again (4401) or reconnect."""
    return _CLOSE_CODES[end.why]


def to_wire_assignment(assignment: ComputeAssignment) -> Assignment:
    return Assignment(
        reservations=[
            ReservationDevices(id=held.reservation_id, devices=list(held.device_uuids))
            for held in assignment.reservations
        ],
        system_labels=dict(assignment.system_labels),
        cordoned=assignment.cordoned,
    )


class NodeConnection:
    """One node's WebSocket on this replica.

    Its assignment pushes run in a short task of its own (`Hub.want_push`), started when a
    push is wanted and ended once none is left: a connected node that is not being pushed to
    holds no task, and a socket that does not drain holds up only its own pushes. Only that
    task sends once the welcome is out, so frames never interleave; it sends the newest
    assignment each time, so pushes never arrive out of order.
    """

    __slots__ = (
        "last_heartbeat",
        "last_seen_written",
        "node_id",
        "pusher",
        "pushes",
        "session_id",
        "source",
        "wanted",
        "websocket",
    )

    def __init__(self, websocket: WebSocket, *, node_id: str, session_id: str, now: datetime) -> None:
        self.websocket = websocket
        self.node_id = node_id
        self.session_id = session_id
        self.last_heartbeat = now
        self.last_seen_written = now  # compute's last_seen_at, written at connect
        self.pushes = 0
        self.wanted = False
        """A push is wanted that no push has sent yet."""
        self.pusher: asyncio.Task[None] | None = None
        """The task sending this connection's wanted pushes, while there are any."""
        self.source: AssignmentSource | None = None
        """Where its assignments come from, once the welcome is sent; None before, and once pushing stopped."""

    async def send(self, data: str) -> None:
        await self.websocket.send_text(data)

    async def close(self, code: int, reason: str) -> None:
        if self.websocket.client_state == WebSocketState.CONNECTED:
            # Starlette: a socket lost at the last moment (WebSocketDisconnect when the server's send fails).
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                await self.websocket.close(code, reason)


class Hub:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        replica: str,
        transaction: TransactionFactory,
        heartbeat_seconds: float,
        missed_heartbeats: int,
        db_clock: DatabaseClock | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.db_clock = db_clock or database_clock(clock)
        """Stamps heartbeats and judges staleness: the database's clock, the same for every replica."""
        self.replica = replica
        self.transaction = transaction
        self.heartbeat_seconds = heartbeat_seconds
        self.timeout_seconds = heartbeat_seconds * missed_heartbeats
        self.connections: dict[str, NodeConnection] = {}
        self._beats: dict[str, tuple[str, datetime]] = {}
        self._listener: Any | None = None
        self._task: asyncio.Task[None] | None = None
        self.release_memory: Callable[[], object] = release_free_memory
        """Called (in a thread) after a tick once RELEASE_AFTER_SESSIONS sessions opened since the last call."""
        self._opened = 0
        """Sessions opened since the last release."""
        self._opened_at_tick = 0
        self._storm_tail = False
        """A storm's release was made: the sessions that still come are its tail."""

    # -- connections ---------------------------------------------------------------------------

    def attach(self, connection: NodeConnection) -> NodeConnection | None:
        """Track a new connection; returns the one it replaces (same node), if any."""
        previous = self.connections.get(connection.node_id)
        self.connections[connection.node_id] = connection
        self._opened += 1
        return previous

    def detach(self, connection: NodeConnection) -> None:
        if self.connections.get(connection.node_id) is connection:
            del self.connections[connection.node_id]
            self._beats.pop(connection.node_id, None)

    def heartbeat(self, connection: NodeConnection) -> None:
        now = self.clock.now()
        connection.last_heartbeat = now
        self._beats[connection.node_id] = (connection.session_id, now)

    async def check(self, connection: NodeConnection) -> SessionEnd | None:
        """Why this connection's session must end now, if it must (see `ended_sessions`)."""
        async with self.db.session() as session:
            ended = await ended_sessions(session, {connection.node_id: connection.session_id})
        return ended.get(connection.node_id)

    # -- assignment pushes ---------------------------------------------------------------------

    def push_local(self, node_ids: list[str]) -> None:
        for node_id in node_ids:
            connection = self.connections.get(node_id)
            if connection is not None:
                self.want_push(connection)

    def want_push(self, connection: NodeConnection) -> None:
        """Send the connection its newest assignment soon: in its pusher task, started here if none runs.

        Before `start_pushing` (the welcome not yet sent) it is only noted."""
        connection.wanted = True
        if connection.source is not None and connection.pusher is None:
            connection.pusher = asyncio.create_task(self._push(connection), name=f"gateway:push:{connection.node_id}")

    def start_pushing(self, connection: NodeConnection, assignments: AssignmentSource) -> None:
        """Once the welcome is sent: push the current assignment now, and each change from now on."""
        connection.source = assignments
        self.want_push(connection)

    async def stop_pushing(self, connection: NodeConnection) -> None:
        """No more pushes to this connection; a push in flight is cancelled."""
        connection.source = None
        pusher = connection.pusher
        if pusher is not None:
            pusher.cancel()
            await asyncio.gather(pusher, return_exceptions=True)

    async def _push(self, connection: NodeConnection) -> None:
        """Send the newest assignment while one is wanted and the session may go on; if pushing
        fails, the session ends rather than go stale silently."""
        try:
            while connection.wanted and (source := connection.source) is not None:
                connection.wanted = False
                ended = await self.check(connection)
                if ended is not None:
                    connection.source = None
                    log.warning("closing the session of node %s: %s", connection.node_id, ended.reason)
                    await connection.close(close_code(ended), ended.reason)
                    return
                assignment = await source(connection.node_id)
                await connection.send(AssignmentMessage(assignment=to_wire_assignment(assignment)).to_wire())
                connection.pushes += 1
        except Exception:
            connection.source = None
            log.exception("pushing an assignment to node %s failed; closing its session", connection.node_id)
            await connection.close(1011, "internal error")
        finally:
            connection.pusher = None

    async def assignments_changed(self, node_ids: list[str]) -> None:
        """Compute's change hook: push here, and tell the other replicas."""
        self.push_local(node_ids)
        if self.db.is_postgres:
            await self._broadcast(node_ids)

    async def _broadcast(self, node_ids: list[str]) -> None:
        chunks: list[list[str]] = [[]]
        size = 0
        for node_id in node_ids:
            if size + len(node_id) + 1 > _PAYLOAD_LIMIT:
                chunks.append([])
                size = 0
            chunks[-1].append(node_id)
            size += len(node_id) + 1
        async with self.db.transaction() as session:
            for chunk in chunks:
                payload = f"{self.replica}\n{','.join(chunk)}"
                await session.execute(
                    text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload}
                )

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        origin, _, ids = payload.partition("\n")
        if origin != self.replica and ids:
            self.push_local(ids.split(","))

    # -- heartbeats and the stale sweep -------------------------------------------------------

    async def tick(self) -> list[str]:
        """Flush heartbeats, close silent local connections, mark stale sessions disconnected.

        Then close every local socket whose session has ended (see `ended_sessions`).
        Returns the nodes whose sessions this tick closed or found closed.
        """
        now = self.clock.now()
        beats, self._beats = self._beats, {}
        silent = [
            c for c in self.connections.values() if (now - c.last_heartbeat).total_seconds() >= self.timeout_seconds
        ]
        due = [
            node_id
            for node_id in beats
            if (c := self.connections.get(node_id)) is not None
            and (now - c.last_seen_written).total_seconds() >= LAST_SEEN_SECONDS
        ]
        async with self.transaction() as session:
            db_now = await self.db_clock.now(session)
            # A beat's age is measured on this replica's clock, its time on the database's.
            stamped = {node: (sid, db_now - (now - at)) for node, (sid, at) in beats.items()}
            written = await record_heartbeats(session, stamped, last_seen=due)
            for connection in silent:
                await close_session(
                    session,
                    node_id=connection.node_id,
                    session_id=connection.session_id,
                    now=db_now,
                    reason="missed heartbeats",
                )
            swept = await sweep_stale(session, now=db_now, timeout_seconds=self.timeout_seconds)
            held = {c.node_id: c.session_id for c in self.connections.values() if c not in silent}
            ended = await ended_sessions(session, held)
        for node_id in written:
            if (beating := self.connections.get(node_id)) is not None:
                beating.last_seen_written = now
        for connection in silent:
            log.warning(
                "node %s missed %.0f s of heartbeats; closing its session", connection.node_id, self.timeout_seconds
            )
            self.detach(connection)
            await connection.close(CLOSE_HEARTBEATS_MISSED, "missed heartbeats")
        for node_id, end in ended.items():
            if (ending := self.connections.get(node_id)) is not None:
                log.warning("closing the session of node %s: %s", node_id, end.reason)
                self.detach(ending)
                await ending.close(close_code(end), end.reason)
        if self.db.is_postgres and self._listener is not None and self._listener.is_closed():
            await self._listen()
            self.push_local(list(self.connections))  # notifications may have been lost meanwhile
        if self._storm_released_now():  # a reconnect storm's freed memory (gateway.memory)
            await asyncio.to_thread(self.release_memory)
        closed = [c.node_id for c in silent] + swept
        return closed + [node_id for node_id in ended if node_id not in closed]

    def _storm_released_now(self) -> bool:
        """Whether this tick hands freed memory back: once RELEASE_AFTER_SESSIONS sessions opened
        since the last time, and once more at the first tick with none new after a storm's tail
        (its stragglers and retries, too few to count as a storm of their own)."""
        storm = self._opened >= RELEASE_AFTER_SESSIONS
        tail_over = self._storm_tail and 0 < self._opened == self._opened_at_tick
        if storm or tail_over:
            self._storm_tail = storm
            self._opened = 0
        self._opened_at_tick = self._opened
        return storm or tail_over

    async def _run(self) -> None:
        while True:
            await self.clock.sleep(self.heartbeat_seconds)
            try:
                await self.tick()
            except Exception:  # one failed tick (a database blip) must not stop the next
                log.exception("gateway heartbeat tick failed; trying again next interval")

    # -- lifecycle -------------------------------------------------------------------------------

    async def _listen(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        dsn = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._listener = await asyncpg.connect(dsn)
        await self._listener.add_listener(CHANNEL, self._notified)

    async def start(self) -> None:
        if self._task is not None:
            return
        if self.db.is_postgres:
            await self._listen()
        self._task = asyncio.create_task(self._run(), name=f"gateway:hub:{self.replica}")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        for connection in list(self.connections.values()):
            await connection.close(1001, "gateway shutting down")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Hub]:
        await self.start()
        try:
            yield self
        finally:
            await self.close()
