"""DigitalOcean error answers map to ComputeError by status and DO error id, keeping DO's message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.providers.digitalocean.errors import api_error, translating


class FakeResponse:
    """The parts of an azure-core response that HttpResponseError and the mapping read."""

    def __init__(self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
        self.status_code = status
        self.reason = "Reason"
        self.headers = headers or {}
        self._text = body if isinstance(body, str) else json.dumps(body)

    def text(self) -> str:
        return self._text

    def json(self) -> Any:
        return json.loads(self._text)


def _error(status: int, error_id: str, message: str, **headers: str) -> HttpResponseError:
    response = FakeResponse(status, {"id": error_id, "message": message, "request_id": "r-1"}, headers)
    return HttpResponseError(response=response)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "error_id", "message", "code", "reason"),
    [
        (401, "Unauthorized", "Unable to authenticate you", ErrorCode.PERMISSION_DENIED, None),
        (403, "forbidden", "You are not authorized to perform this operation", ErrorCode.PERMISSION_DENIED, None),
        (404, "not_found", "The resource you were accessing could not be found.", ErrorCode.NOT_FOUND, None),
        (409, "conflict", "the cluster is busy", ErrorCode.CONFLICT, None),
        (422, "unprocessable_entity", "a cluster with the name x already exists", ErrorCode.CONFLICT, None),
        (
            422,
            "unprocessable_entity",
            "creating this/these droplet(s) will exceed your droplet limit",
            ErrorCode.UNAVAILABLE,
            "quotaExceeded",
        ),
        (
            422,
            "unprocessable_entity",
            "size gpu-h100x8-640gb is not available in tor1",
            ErrorCode.UNAVAILABLE,
            "stockout",
        ),
        (422, "unprocessable_entity", "name is invalid", ErrorCode.INVALID_INPUT, None),
        (400, "bad_request", "the body is not JSON", ErrorCode.INVALID_INPUT, None),
        (500, "server_error", "Server was unable to give you a response.", ErrorCode.UNAVAILABLE, None),
    ],
)
def test_each_answer_maps_by_status_and_id(
    status: int, error_id: str, message: str, code: ErrorCode, reason: str | None
) -> None:
    mapped = api_error(_error(status, error_id, message), SimClock())
    assert (mapped.code, mapped.reason) == (code, reason)
    assert message in mapped.message and error_id in mapped.message


def test_a_429_takes_retry_after_first_then_the_ratelimit_reset() -> None:
    clock = SimClock()
    now = int(clock.now().timestamp())
    both = api_error(
        _error(
            429,
            "too_many_requests",
            "API Rate limit exceeded.",
            **{"retry-after": "17", "ratelimit-reset": str(now + 900)},
        ),
        clock,
    )
    assert (both.code, both.reason, both.retry_after) == (ErrorCode.UNAVAILABLE, "throttled", 17.0)
    reset_only = api_error(
        _error(429, "too_many_requests", "API Rate limit exceeded.", **{"ratelimit-reset": str(now + 900)}), clock
    )
    assert reset_only.retry_after == 900.0


def test_a_refusal_can_be_invalid_state_where_the_caller_says_so() -> None:
    refused = api_error(
        _error(422, "unprocessable_entity", "cluster is in use"), SimClock(), refused=ErrorCode.INVALID_STATE
    )
    assert refused.code == ErrorCode.INVALID_STATE


def test_an_answer_without_do_envelope_still_maps() -> None:
    error = HttpResponseError(response=FakeResponse(502, "<html>bad gateway</html>"))  # type: ignore[arg-type]
    assert api_error(error, SimClock()).code == ErrorCode.UNAVAILABLE


def test_sdk_exceptions_never_leave_the_block() -> None:
    with pytest.raises(ComputeError) as caught, translating(SimClock()):
        raise ServiceRequestError("connection refused")
    assert caught.value.code == ErrorCode.UNAVAILABLE
    assert isinstance(caught.value.__cause__, ServiceRequestError)
