"""`gateway()`: the node gateway as a Compute module.

It attaches `compute.gateway` (the Gateway) and `compute.join_tokens` (what the
substrate uses to make, top up and revoke tokens), mounts `/v1/gateway/join` and
`/v1/gateway/connect` (public: they authenticate with the join token and the node
credential, not an API key), and needs `start()`/`close()` from the Compute's lifecycle
for its heartbeat tick and, on PostgreSQL, its LISTEN connection.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from fastapi import APIRouter
from sqlalchemy import func, select

from better_compute.core.findings import Finding
from better_compute.gateway.handshakes import MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_CLIENT
from better_compute.gateway.join_limit import MAX_JOINS_IN_FLIGHT
from better_compute.gateway.service import Gateway
from better_compute.gateway.tables import NodeSessionRow

if TYPE_CHECKING:
    from better_compute.core.module import ComputeLike
    from better_compute.engine import Reconciler

__all__ = ["GatewayModule", "gateway"]


class GatewayModule:
    name = "gateway"
    public_prefixes = ("/v1/gateway",)

    def __init__(
        self,
        *,
        heartbeat_seconds: float = 10.0,
        missed_heartbeats: int = 3,
        hello_timeout: float = 30.0,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
        max_unauthenticated_per_client: int = MAX_UNAUTHENTICATED_PER_CLIENT,
        max_joins_in_flight: int = MAX_JOINS_IN_FLIGHT,
    ) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self.missed_heartbeats = missed_heartbeats
        self.hello_timeout = hello_timeout
        self.max_unauthenticated = max_unauthenticated
        self.max_unauthenticated_per_client = max_unauthenticated_per_client
        self.max_joins_in_flight = max_joins_in_flight
        self._gateway: Gateway | None = None

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            raise RuntimeError("the gateway module is not bound to a Compute yet")
        return self._gateway

    def bind(self, compute: ComputeLike) -> None:
        self._gateway = Gateway(
            compute.db,
            compute.clock,
            compute.reservations,
            heartbeat_seconds=self.heartbeat_seconds,
            missed_heartbeats=self.missed_heartbeats,
            hello_timeout=self.hello_timeout,
            max_unauthenticated=self.max_unauthenticated,
            max_unauthenticated_per_client=self.max_unauthenticated_per_client,
            max_joins_in_flight=self.max_joins_in_flight,
        )
        compute.attach("gateway", self._gateway)
        compute.attach("join_tokens", self._gateway.tokens)

    def reconcilers(self) -> list[Reconciler]:
        return []

    def routers(self) -> list[APIRouter]:
        return self.gateway.routers()

    async def start(self) -> None:
        await self.gateway.start()

    async def close(self) -> None:
        await self.gateway.close()

    def self_check(self) -> list[Finding]:
        findings = []
        if self.heartbeat_seconds <= 0 or self.missed_heartbeats < 2:
            findings.append(
                Finding(
                    "gateway.heartbeat-settings",
                    "error",
                    "heartbeat_seconds must be positive and missed_heartbeats at least 2, "
                    "or one late heartbeat disconnects a healthy node",
                )
            )
        return findings

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        """A connected session far past its heartbeat timeout means no replica runs the gateway's tick
        (the server's health, the same for every tenant: a count, naming no node)."""
        gateway = self.gateway
        cutoff = gateway.clock.now() - timedelta(seconds=2 * gateway.hub.timeout_seconds)
        async with gateway.db.session() as session:
            stale = await session.scalar(
                select(func.count())
                .select_from(NodeSessionRow)
                .where(NodeSessionRow.connected.is_(True), NodeSessionRow.last_heartbeat_at < cutoff)
            )
        if stale:
            return [
                Finding(
                    "gateway.sessions-not-swept",
                    "warning",
                    f"{stale} node session(s) show connected with no heartbeat for over "
                    f"{2 * gateway.hub.timeout_seconds:.0f} s: is `better-compute serve` running (the gateway's tick)?",
                )
            ]
        return []


def gateway(
    *,
    heartbeat_seconds: float = 10.0,
    missed_heartbeats: int = 3,
    hello_timeout: float = 30.0,
    max_unauthenticated: int = MAX_UNAUTHENTICATED,
    max_unauthenticated_per_client: int = MAX_UNAUTHENTICATED_PER_CLIENT,
    max_joins_in_flight: int = MAX_JOINS_IN_FLIGHT,
) -> GatewayModule:
    """The node gateway module for `better_compute(modules=[...])`; the caps on connections awaiting
    their hello and on joins in flight, and the hello timeout (at most 120 s), are in
    docs/input-limits.md."""
    return GatewayModule(
        heartbeat_seconds=heartbeat_seconds,
        missed_heartbeats=missed_heartbeats,
        hello_timeout=hello_timeout,
        max_unauthenticated=max_unauthenticated,
        max_unauthenticated_per_client=max_unauthenticated_per_client,
        max_joins_in_flight=max_joins_in_flight,
    )
