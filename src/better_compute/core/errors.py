"""The one error tree of better-compute.

    ComputeError(code, message, path=None, problems=(), retry_after=None)
      code: ErrorCode
        INVALID_INPUT       bad input; `path` is a JSON pointer to the field
        INVALID_STATE       the request does not fit the object's state
        NOT_FOUND           no such object (or not visible to this tenant)
        CONFLICT            it exists already, or someone else holds it
        PERMISSION_DENIED   the caller may not do this
        UNAVAILABLE         a dependency is down or throttling; retry later

Drivers translate their SDK's exceptions into this tree at the boundary
(`raise ComputeError(...) from exc`); nothing else travels past them. The CLI
prints one line per error, and the HTTP API maps codes to statuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["ComputeError", "ErrorCode", "Problem", "escaped", "http_status"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def escaped(text: str) -> str:
    """`text` with each lone UTF-16 surrogate written out as its `\\uXXXX` escape.

    An error repeats input (a key in its path, a value in its message); a lone surrogate
    there would make the JSON answer, a WebSocket close reason, a log line or a database
    row unencodable. Escaped once here, every error is text every encoder takes."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


class ErrorCode(StrEnum):
    INVALID_INPUT = "INVALID_INPUT"
    INVALID_STATE = "INVALID_STATE"
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAVAILABLE = "UNAVAILABLE"


_HTTP_STATUS = {
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.INVALID_STATE: 409,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.UNAVAILABLE: 503,
}


def http_status(code: ErrorCode, reason: str | None = None) -> int:
    """The HTTP status the API answers for an error code (413 for an input refused for its size)."""
    if code is ErrorCode.INVALID_INPUT and reason == "too-large":
        return 413
    return _HTTP_STATUS[code]


@dataclass(frozen=True)
class Problem:
    """One problem with an input: where (a JSON pointer) and what."""

    path: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", escaped(self.path))
        object.__setattr__(self, "message", escaped(self.message))

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class ComputeError(Exception):
    """An error a caller can act on; never carries a secret value, and its text is always
    encodable (input it repeats is `escaped`)."""

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        path: str | None = None,
        *,
        problems: list[Problem] | tuple[Problem, ...] = (),
        retry_after: float | None = None,
        reason: str | None = None,
    ) -> None:
        self.code = ErrorCode(code)
        self.message = escaped(message)
        self.problems = tuple(problems)
        self.path = escaped(path) if path is not None else (self.problems[0].path if self.problems else None)
        self.retry_after = retry_after
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.code.value}{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.path is not None:
            body["path"] = self.path
        if self.problems:
            body["problems"] = [p.to_dict() for p in self.problems]
        if self.retry_after is not None:
            body["retryAfter"] = self.retry_after
        if self.reason is not None:
            body["reason"] = self.reason
        return body

    @classmethod
    def invalid(cls, problems: list[Problem]) -> ComputeError:
        """One INVALID_INPUT error that reports every problem at once."""
        if not problems:
            raise ValueError("an invalid-input error needs at least one problem")
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return cls(ErrorCode.INVALID_INPUT, f"{first.message}{more}", problems=problems)
