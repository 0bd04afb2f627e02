"""Limits on WebSocket connections that have not said hello yet.

A connection costs the gateway a socket and a task from accept until its hello is
checked, and nothing has authenticated it by then. So those connections are counted,
per client address and in total, and one over either cap is refused before it is
accepted (the upgrade answers 403). The hello timeout bounds how long each may stay
unauthenticated, and is itself bounded by MAX_HELLO_TIMEOUT. The counts and the caps
are in /metrics; docs/input-limits.md lists the defaults.
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally

from prometheus_client import Counter, Gauge

__all__ = [
    "MAX_HELLOS_CHECKED",
    "MAX_HELLO_TIMEOUT",
    "MAX_UNAUTHENTICATED",
    "MAX_UNAUTHENTICATED_PER_CLIENT",
    "HandshakeLimits",
]

MAX_UNAUTHENTICATED = 4096
"""Connections awaiting their hello, over all clients, by default."""

MAX_UNAUTHENTICATED_PER_CLIENT = 256
"""Connections awaiting their hello from one client address, by default: a cluster's nodes behind one
NAT gateway reconnect at once after a restart, and a hello takes milliseconds."""

MAX_HELLOS_CHECKED = 64
"""Hellos checked at once (parsed, the credential looked up, the session opened); the others wait
as the text they arrived as. In a reconnect storm of thousands, each parsed hello and its open
database session would otherwise all wait together for the database (on SQLite, for the write
turn), and the memory they held at that peak stays with the gateway as fragmentation
(bench/gateway.py: about 28 KiB per connected node)."""

MAX_HELLO_TIMEOUT = 120.0
"""The longest hello timeout a gateway may be configured with, in seconds."""

UNAUTHENTICATED = Gauge(
    "better_compute_gateway_unauthenticated_connections", "WebSocket connections that have not said hello yet."
)
LIMIT = Gauge(
    "better_compute_gateway_unauthenticated_limit",
    "Caps on connections awaiting their hello, and the hello timeout in seconds.",
    ["scope"],
)
REFUSED = Counter(
    "better_compute_gateway_connections_refused",
    "WebSocket connections refused before accept, by the cap they hit.",
    ["cap"],
)


class HandshakeLimits:
    """Counts unauthenticated connections; `enter` says which cap refuses one, or None."""

    def __init__(
        self,
        *,
        total: int = MAX_UNAUTHENTICATED,
        per_client: int = MAX_UNAUTHENTICATED_PER_CLIENT,
        hello_timeout: float = 30.0,
        checked: int = MAX_HELLOS_CHECKED,
    ) -> None:
        if total < 1 or per_client < 1 or checked < 1:
            raise ValueError("the caps on unauthenticated connections and on hellos checked at once are at least 1")
        if not 0 < hello_timeout <= MAX_HELLO_TIMEOUT:
            raise ValueError(f"the hello timeout is more than 0 and at most {MAX_HELLO_TIMEOUT:.0f} s")
        self.total = total
        self.per_client = per_client
        self.hello_timeout = hello_timeout
        self.checking = asyncio.Semaphore(checked)
        """Held while a hello is checked (MAX_HELLOS_CHECKED)."""
        self._by_client: Tally[str] = Tally()
        self._count = 0
        LIMIT.labels("total").set(total)
        LIMIT.labels("per_client").set(per_client)
        LIMIT.labels("hello_timeout_seconds").set(hello_timeout)

    @property
    def count(self) -> int:
        return self._count

    def enter(self, client: str) -> str | None:
        """Count one more connection from `client`; the cap it would break instead (not counted), or None."""
        cap = (
            "total"
            if self._count >= self.total
            else "per_client"
            if self._by_client[client] >= self.per_client
            else None
        )
        if cap is not None:
            REFUSED.labels(cap).inc()
            return cap
        self._count += 1
        self._by_client[client] += 1
        UNAUTHENTICATED.inc()
        return None

    def leave(self, client: str) -> None:
        """The connection said hello, or ended; it no longer counts."""
        self._count -= 1
        self._by_client[client] -= 1
        if self._by_client[client] <= 0:
            del self._by_client[client]
        UNAUTHENTICATED.dec()
