"""DigitalOcean's errors, turned into ComputeError at the driver's edge.

    azure.core.exceptions.HttpResponseError (pydo)       -> by status and DO error id
        401, 403                                         -> PERMISSION_DENIED
        404 not_found                                    -> NOT_FOUND
        409, 422 "... already exists/in use"             -> CONFLICT
        422 "... exceed your droplet limit"              -> UNAVAILABLE (reason quotaExceeded)
        422 "... not available ..." (a size)             -> UNAVAILABLE (reason stockout)
        400, other 422                                   -> INVALID_INPUT (or the caller's `refused` code)
        429 too_many_requests                            -> UNAVAILABLE (reason throttled, retry_after)
        5xx                                              -> UNAVAILABLE
    azure.core.exceptions.ServiceRequestError/ResponseError -> UNAVAILABLE (unreachable, timed out)

DigitalOcean's own message is kept; the API token is never in it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["api_error", "translating"]

_QUOTA = re.compile(r"droplet limit|quota|limit exceeded", re.IGNORECASE)
_STOCKOUT = re.compile(r"not available|insufficient capacity|out of capacity|sold out", re.IGNORECASE)
_EXISTS = re.compile(r"already exists|already in use|already taken", re.IGNORECASE)


def _envelope(exc: HttpResponseError) -> tuple[str, str]:
    """DigitalOcean's `{id, message}`, or what the response says instead."""
    response: Any = exc.response
    body: Any = None
    if response is not None:
        try:
            body = response.json()
        except Exception:  # not JSON: fall back to the exception's own text
            body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body.get("id") or ""), body["message"]
    return "", exc.reason or exc.message or "no message"


def _retry_after(exc: HttpResponseError, clock: Clock) -> float | None:
    response: Any = exc.response
    headers = response.headers if response is not None else {}
    value = headers.get("retry-after")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
    reset = headers.get("ratelimit-reset")
    if reset is not None:
        try:
            return float(max(0, math.ceil(float(reset) - clock.now().timestamp())))
        except ValueError:
            pass
    return None


def api_error(exc: HttpResponseError, clock: Clock, *, refused: ErrorCode = ErrorCode.INVALID_INPUT) -> ComputeError:
    """The ComputeError for one DigitalOcean error answer."""
    status = exc.status_code or 0
    error_id, message = _envelope(exc)
    text = f"DigitalOcean: {message}" + (f" ({error_id})" if error_id else "")
    if status == 429:
        return ComputeError(ErrorCode.UNAVAILABLE, text, retry_after=_retry_after(exc, clock), reason="throttled")
    if status in (401, 403):
        return ComputeError(ErrorCode.PERMISSION_DENIED, text)
    if status == 404:
        return ComputeError(ErrorCode.NOT_FOUND, text)
    if status == 409 or (status == 422 and _EXISTS.search(message)):
        return ComputeError(ErrorCode.CONFLICT, text)
    if status == 422 and _QUOTA.search(message):
        return ComputeError(ErrorCode.UNAVAILABLE, text, reason="quotaExceeded")
    if status == 422 and _STOCKOUT.search(message):
        return ComputeError(ErrorCode.UNAVAILABLE, text, reason="stockout")
    if status in (400, 422):
        return ComputeError(refused, text)
    return ComputeError(ErrorCode.UNAVAILABLE, text)


@contextmanager
def translating(clock: Clock, *, refused: ErrorCode = ErrorCode.INVALID_INPUT) -> Iterator[None]:
    """Run a block of pydo calls; its SDK exceptions leave it as ComputeError."""
    try:
        yield
    except HttpResponseError as exc:
        raise api_error(exc, clock, refused=refused) from exc
    except (ServiceRequestError, ServiceResponseError) as exc:
        raise ComputeError(ErrorCode.UNAVAILABLE, f"DigitalOcean API unreachable: {type(exc).__name__}") from exc
