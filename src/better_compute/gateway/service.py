"""The node gateway as one object: join, node sessions, assignment pushes, join tokens.

It is built over compute's node and reservation services: their change hook (after
commit) drives the pushes, and its writes go through their change-notifying transaction
so that a node becoming ready is pushed too. `start()` begins the heartbeat tick (and,
on PostgreSQL, LISTEN); `close()` ends them. `routers()` gives the HTTP and WebSocket
endpoints for `better-compute serve`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Coroutine
from typing import Any

from fastapi import APIRouter, WebSocket

from better_compute.compute.reservations import Reservations
from better_compute.core.clock import Clock
from better_compute.core.ids import new_id
from better_compute.gateway.connection import serve_connection
from better_compute.gateway.handshakes import MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_CLIENT, HandshakeLimits
from better_compute.gateway.hub import Hub
from better_compute.gateway.join_limit import MAX_JOINS_IN_FLIGHT, JoinLimit
from better_compute.gateway.joining import Joined, JoinHooks, Proof, join_node
from better_compute.gateway.routes import gateway_router
from better_compute.gateway.sessions import is_connected
from better_compute.gateway.tls import limit_tls_read_buffer, share_tls_read_buffer
from better_compute.gateway.tokens import JoinTokens, join_token_pool
from better_compute.store import Database
from better_compute.store.clock import DatabaseClock
from better_compute.wire.protocol import JoinRequest

__all__ = ["Gateway"]

log = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        reservations: Reservations,
        *,
        heartbeat_seconds: float = 10.0,
        missed_heartbeats: int = 3,
        hello_timeout: float = 30.0,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
        max_unauthenticated_per_client: int = MAX_UNAUTHENTICATED_PER_CLIENT,
        max_joins_in_flight: int = MAX_JOINS_IN_FLIGHT,
        replica: str | None = None,
        db_clock: DatabaseClock | None = None,
        hooks: JoinHooks = JoinHooks(),
    ) -> None:
        self.db = db
        self.clock = clock
        self.reservations = reservations
        self.handshakes = HandshakeLimits(
            total=max_unauthenticated, per_client=max_unauthenticated_per_client, hello_timeout=hello_timeout
        )
        self.joins = JoinLimit(max_joins_in_flight)
        self.tokens = JoinTokens(db, clock)
        self._hooks = hooks
        self.transaction = reservations.transaction
        """A write whose node changes reach compute's change hook after commit."""
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}:{new_id('rep')[-8:]}"
        self.hub = Hub(
            db,
            clock,
            replica=self.replica,
            transaction=self.transaction,
            heartbeat_seconds=heartbeat_seconds,
            missed_heartbeats=missed_heartbeats,
            db_clock=db_clock,
        )
        self._unsubscribe = reservations.subscribe(self.hub.assignments_changed)
        self._assignments = reservations.assignments  # one bound method for every connection, not one each

    @property
    def hooks(self) -> JoinHooks:
        """The admission, identity check and first-session hook (see gateway.joining)."""
        return self._hooks

    def register_hooks(self, hooks: JoinHooks) -> None:
        """Called by the one module that manages the pools' machines (the kubernetes substrate), which
        is bound after the gateway is built; a second module's hooks would silently replace the first's."""
        if self._hooks:
            raise ValueError("the gateway's join hooks are registered already: one module manages the machines")
        self._hooks = hooks

    async def join(self, request: JoinRequest) -> Joined:
        """Redeem one use of the request's token for its node (see gateway.joining).

        The identity check runs first, outside the transaction (it may ask the node's cluster),
        and only for a token that could be redeemed: a stranger's guess reaches no cluster. Past
        the cap on joins in flight the join is refused at once (UNAVAILABLE, see gateway.join_limit)."""
        with self.joins.slot():
            return await self._join(request)

    async def _join(self, request: JoinRequest) -> Joined:
        proof: Proof | None = None
        identity = self._hooks.identity
        if identity is not None:
            async with self.db.session() as session:
                pool_id = await join_token_pool(session, request.token, request.inventory.node_name)
            if pool_id is not None:
                proof = await identity(
                    pool_id=pool_id, node_name=request.inventory.node_name, identity_token=request.identity_token
                )
        async with self.transaction() as session:
            joined = await join_node(
                session,
                now=self.clock.now(),
                token=request.token,
                inventory=request.inventory,
                admission=self._hooks.admission,
                proof=proof,
            )
        log.info("node %s (%s) joined pool %s", joined.node.id, joined.node.name, joined.node.pool_id)
        return joined

    def serve(self, websocket: WebSocket) -> Coroutine[Any, Any, None]:
        """The node's session (serve_connection), as the coroutine to await: no layer of its own."""
        return serve_connection(
            websocket,
            hub=self.hub,
            clock=self.clock,
            transaction=self.transaction,
            assignments=self._assignments,
            handshakes=self.handshakes,
            first_session=self._hooks.first_session,
        )

    async def is_connected(self, node_id: str) -> bool:
        """Whether the node has a live session on any replica."""
        async with self.db.session() as session:
            return await is_connected(session, node_id)

    def routers(self) -> list[APIRouter]:
        return [gateway_router(self)]

    async def start(self) -> None:
        limit_tls_read_buffer()
        share_tls_read_buffer()
        await self.hub.start()

    async def close(self) -> None:
        self._unsubscribe()
        await self.hub.close()
