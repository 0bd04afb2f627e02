"""A server span per HTTP request (core.tracing), mounted by create_app only while tracing is on.

Outermost, so the span covers the API-key check and the 503 mapping too. Its name is the method
and the route's template (`GET /v1/pools/{pool_id}`), as OpenTelemetry's HTTP conventions ask,
so ids never make a span name of their own; a path no route matched is named by its method alone.
The attributes are the method, the template, the status and, once authenticated, the tenant and
the key's id: never the path's values, the query string, a header or a body.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from better_compute.core import tracing
from better_compute.core.http import PRINCIPAL_SCOPE_KEY

__all__ = ["TracingMiddleware"]


class TracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = tracing.tracer()
        if scope["type"] != "http" or tracer is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind

        method: str = scope["method"]
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with tracer.start_as_current_span(
            method, kind=SpanKind.SERVER, attributes={"http.request.method": method}, record_exception=False
        ) as current:
            try:
                await self.app(scope, receive, sending)
            except Exception as exc:
                tracing.failed(current, exc)
                raise
            finally:
                _describe(current, scope, method, status)


def _describe(current: Any, scope: Scope, method: str, status: int) -> None:
    route = getattr(scope.get("route"), "path", None)
    if route:
        current.update_name(f"{method} {route}")
        current.set_attribute("http.route", route)
    current.set_attribute("http.response.status_code", status)
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    if principal is not None:
        current.set_attribute("bc.tenant", principal.tenant_id)
        current.set_attribute("bc.api_key", principal.key_id)
    if status >= 500:
        from opentelemetry.trace import Status, StatusCode

        current.set_status(Status(StatusCode.ERROR))
