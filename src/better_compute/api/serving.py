"""uvicorn's Server for `better-compute serve`: it ends the console's event streams as it shuts down.

`websocket_protocol()` is the WebSocket protocol `serve` gives uvicorn: one that holds less per
idle node connection (gateway/websocket.py). `raise_open_files_limit()` is called by `serve` first: every connected node holds a socket,
and the usual soft limit of 1,024 open files would cap a gateway far below the 10,000 nodes
one replica is meant to hold; the hard limit is what the operator allows.

uvicorn waits for every open response to finish before it runs the lifespan's shutdown, and a
server-sent event stream (/ui/events) never finishes by itself: one open console tab would hold
Ctrl-C for ever. This Server sets the app's closing event first, so the streams end (a browser's
EventSource reconnects to the next server) and the shutdown goes on as before. Last, it exports
the spans still batched (core.tracing): uvicorn then raises the signal again, which ends the process.
"""

from __future__ import annotations

import resource
import socket
from typing import Any

import uvicorn

from better_compute.api.console.events import end_streams
from better_compute.api.console.routes import closing
from better_compute.core import tracing

__all__ = ["Server", "raise_open_files_limit", "websocket_protocol"]


def websocket_protocol() -> Any:
    """uvicorn's `ws` setting for `serve`: the gateway's lean protocol (gateway/websocket.py), or
    uvicorn's choice where this uvicorn has no sans-I/O protocol for it to build on (before 0.35)."""
    try:
        from better_compute.gateway.websocket import LeanWebSocketProtocol
    except ImportError:
        return "auto"
    return LeanWebSocketProtocol


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # an unlimited hard limit the kernel caps lower: keep what we have
        return soft
    return hard


class Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if hasattr(self.config.app, "state"):  # an app object (create_app's), not an import string
            end_streams(closing(self.config.app))
        await super().shutdown(sockets)
        tracing.flush()  # the spans up to the lifespan's end: uvicorn then re-raises the signal, ending the process
