"""The web console at /ui: server-rendered pages over the ops views, a session cookie, live updates over SSE.

Read-only: every page is a view over the same ops functions the /v1 routes answer with
(console/views.py), scoped to the tenant of the API key signed in with (console/session.py),
and refreshed when the change feed names one of that tenant's Nodes (console/events.py).
"""

from better_compute.api.console.routes import router

__all__ = ["PREFIX", "router"]

PREFIX = "/ui"
