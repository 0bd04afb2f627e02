"""uvicorn's Server for `better-compute serve`: it ends the console's event streams as it shuts down.

uvicorn waits for every open response to finish before it runs the lifespan's shutdown, and a
server-sent event stream (/ui/events) never finishes by itself: one open console tab would hold
Ctrl-C for ever. This Server sets the app's closing event first, so the streams end (a browser's
EventSource reconnects to the next server) and the shutdown goes on as before. Last, it exports
the spans still batched (core.tracing): uvicorn then raises the signal again, which ends the process.
"""

from __future__ import annotations

import socket

import uvicorn

from better_compute.api.console.events import end_streams
from better_compute.api.console.routes import closing
from better_compute.core import tracing

__all__ = ["Server"]


class Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if hasattr(self.config.app, "state"):  # an app object (create_app's), not an import string
            end_streams(closing(self.config.app))
        await super().shutdown(sockets)
        tracing.flush()  # the spans up to the lifespan's end: uvicorn then re-raises the signal, ending the process
