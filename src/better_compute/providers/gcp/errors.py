"""google-api-core and google-auth exceptions -> ComputeError, keeping Google's message.

GoogleAPICallError (HTTP status from the google.rpc.Status envelope)
  404 NotFound                           -> NOT_FOUND
  409 Conflict / AlreadyExists           -> CONFLICT
  429 TooManyRequests (throttled)        -> UNAVAILABLE, retry_after from RetryInfo or Retry-After
  403 Forbidden "Insufficient ... quota" -> INVALID_STATE, reason "quota"
  401 / 403 otherwise                    -> PERMISSION_DENIED
  400 "running incompatible operation"   -> UNAVAILABLE, reason "busy" (another operation holds the cluster)
  400 FailedPrecondition otherwise       -> INVALID_STATE
  400 BadRequest / InvalidArgument       -> INVALID_INPUT
  5xx, timeouts, connection errors       -> UNAVAILABLE
Operation errors (a google.rpc.Status in a DONE Operation, or a node pool's condition)
  RESOURCE_EXHAUSTED / GCE_STOCKOUT      -> UNAVAILABLE, reason "stockout"
  quota                                  -> INVALID_STATE, reason "quota"
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import google.auth.exceptions
import requests
from google.api_core import exceptions as gexc

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["BUSY_RETRY_SECONDS", "google_errors", "operation_error", "pool_error", "to_compute_error"]

BUSY_RETRY_SECONDS = 30.0
_STOCKOUT = re.compile(r"ZONE_RESOURCE_POOL_EXHAUSTED|GCE_STOCKOUT|does not have enough resources", re.I)
_QUOTA = re.compile(r"quota", re.I)
_BUSY = re.compile(r"incompatible operation|currently (being|running|upgrading)|is currently", re.I)
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _envelope(exc: gexc.GoogleAPICallError) -> dict[str, Any]:
    """The google.rpc.Status envelope's `error` of the HTTP response, when there is one."""
    response = getattr(exc, "response", None)
    if response is None:
        return {}
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _provider_message(exc: gexc.GoogleAPICallError) -> str:
    """Google's own message, without the method and URL that google-api-core puts before it."""
    message = _envelope(exc).get("message")
    return message if isinstance(message, str) and message else str(exc.message)


def _is_failed_precondition(exc: gexc.GoogleAPICallError) -> bool:
    """google-api-core picks the class from the HTTP status (400: BadRequest); the envelope's status is finer."""
    return isinstance(exc, gexc.FailedPrecondition) or _envelope(exc).get("status") == "FAILED_PRECONDITION"


def _retry_after(exc: gexc.GoogleAPICallError) -> float | None:
    for detail in exc.details or ():
        if isinstance(detail, dict) and detail.get("@type", "").endswith("google.rpc.RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    response = getattr(exc, "response", None)
    header = response.headers.get("Retry-After") if response is not None else None
    if header and header.strip().isdigit():
        return float(header)
    return None


def to_compute_error(exc: gexc.GoogleAPICallError, what: str) -> ComputeError:
    message = f"{what}: {_provider_message(exc)}"
    if isinstance(exc, gexc.NotFound):
        return ComputeError(ErrorCode.NOT_FOUND, message)
    if isinstance(exc, gexc.Conflict):
        return ComputeError(ErrorCode.CONFLICT, message)
    if isinstance(exc, gexc.TooManyRequests):
        return ComputeError(ErrorCode.UNAVAILABLE, message, retry_after=_retry_after(exc), reason="throttled")
    if isinstance(exc, gexc.Forbidden) and _QUOTA.search(message):
        return ComputeError(ErrorCode.INVALID_STATE, message, reason="quota")
    if isinstance(exc, gexc.Unauthorized | gexc.Forbidden):
        return ComputeError(ErrorCode.PERMISSION_DENIED, message)
    if isinstance(exc, gexc.BadRequest) and _BUSY.search(message):
        return ComputeError(ErrorCode.UNAVAILABLE, message, retry_after=BUSY_RETRY_SECONDS, reason="busy")
    if _is_failed_precondition(exc):
        return ComputeError(ErrorCode.INVALID_STATE, message)
    if isinstance(exc, gexc.BadRequest):
        return ComputeError(ErrorCode.INVALID_INPUT, message)
    return ComputeError(ErrorCode.UNAVAILABLE, message)


@contextmanager
def google_errors(what: str) -> Iterator[None]:
    """Turn every Google SDK or transport exception raised inside into a ComputeError."""
    try:
        yield
    except gexc.GoogleAPICallError as exc:
        raise to_compute_error(exc, what) from exc
    except gexc.RetryError as exc:
        raise ComputeError(ErrorCode.UNAVAILABLE, f"{what}: {exc.message}") from exc
    except google.auth.exceptions.RefreshError as exc:
        raise ComputeError(ErrorCode.PERMISSION_DENIED, f"{what}: Google refused the credentials: {exc}") from exc
    except google.auth.exceptions.GoogleAuthError as exc:
        raise ComputeError(ErrorCode.PERMISSION_DENIED, f"{what}: {exc}") from exc
    except requests.RequestException as exc:
        raise ComputeError(ErrorCode.UNAVAILABLE, f"{what}: the GKE API did not answer ({type(exc).__name__})") from exc


def _failure(message: str, *, stockout: bool, quota: bool) -> ComputeError:
    if stockout:
        return ComputeError(ErrorCode.UNAVAILABLE, message, reason="stockout")
    if quota:
        return ComputeError(ErrorCode.INVALID_STATE, message, reason="quota")
    return ComputeError(ErrorCode.INVALID_STATE, message)


def operation_error(what: str, error: Any) -> ComputeError:
    """The error of a DONE container Operation (google.rpc.Status: code 8 is RESOURCE_EXHAUSTED)."""
    message = f"{what}: {error.message}"
    return _failure(
        message, stockout=error.code == 8 or bool(_STOCKOUT.search(message)), quota=bool(_QUOTA.search(message))
    )


def pool_error(what: str, message: str, condition_codes: list[str]) -> ComputeError:
    """A node pool in ERROR, from its status message and conditions (GCE_STOCKOUT, GCE_QUOTA_EXCEEDED)."""
    text = f"{what}: {message}"
    return _failure(
        text,
        stockout="GCE_STOCKOUT" in condition_codes or bool(_STOCKOUT.search(text)),
        quota="GCE_QUOTA_EXCEEDED" in condition_codes or bool(_QUOTA.search(text)),
    )
