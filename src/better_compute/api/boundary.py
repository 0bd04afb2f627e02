"""Every HTTP request body through the input boundary (core/input.py), before any route runs.

Plain ASGI: the body is read message by message and refused (413) as soon as it passes
its byte limit, or at once when Content-Length says it will; it is never held whole
past the limit. A body that is not acceptable JSON (not UTF-8, a lone surrogate, NUL,
NaN, too deep, too long a number, string or array) is answered 400 INVALID_INPUT at its
JSON pointer; the console's HTML forms (FORM_PREFIXES) are only held to their byte limit. What passes is replayed to the route unchanged. Limits by path prefix:
BODY_LIMITS, documented in docs/input-limits.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from better_compute.api.middleware import HttpMiddleware
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.http import error_response
from better_compute.core.input import DOCUMENT, FRAME, TOO_LARGE, InputLimits, decode_json, read_limited

__all__ = ["BODY_LIMITS", "FORM_PREFIXES", "InputBoundaryMiddleware", "body_limits"]

FORM_PREFIXES = ("/ui/",)
"""Paths whose bodies are HTML forms (the web console's sign-in and sign-out), held to their byte limit but
not read as JSON."""

BODY_LIMITS: tuple[tuple[str, InputLimits], ...] = (
    ("/ui/", replace(DOCUMENT, max_bytes=16 * 1024)),
    ("/v1/gateway/", FRAME),
    ("/v1/fleet/", DOCUMENT),
    ("/", replace(DOCUMENT, max_bytes=1024 * 1024)),
)
"""The first prefix a path starts with gives its body's limits."""


def body_limits(path: str) -> InputLimits:
    return next(limits for prefix, limits in BODY_LIMITS if path.startswith(prefix))


class InputBoundaryMiddleware(HttpMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limits = body_limits(scope["path"])
        try:
            body = await _read(scope, receive, limits.max_bytes)
            if body.strip() and not scope["path"].startswith(FORM_PREFIXES):
                decode_json(body, limits=limits, what="the request body")
        except ComputeError as err:
            await error_response(err)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read(scope: Scope, receive: Receive, max_bytes: int) -> bytes:
    declared = Headers(scope=scope).get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"the request body is at most {max_bytes} bytes", "", reason=TOO_LARGE
        )

    async def chunks() -> AsyncIterator[bytes]:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            yield message.get("body", b"")
            if not message.get("more_body", False):
                return

    return await read_limited(chunks(), max_bytes)
