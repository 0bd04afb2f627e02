"""google.rpc.Status errors, as container.googleapis.com answers them."""

from __future__ import annotations

from typing import Any

__all__ = ["RPC_CODES", "GkeApiError"]

RPC_CODES = {
    "INVALID_ARGUMENT": 3,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "UNAVAILABLE": 14,
    "UNAUTHENTICATED": 16,
}

_HTTP = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
    "UNAUTHENTICATED": 401,
}


class GkeApiError(Exception):
    """An error the API answers synchronously: HTTP status plus the google.rpc.Status envelope."""

    def __init__(
        self,
        status: str,
        message: str,
        *,
        details: list[dict[str, Any]] | None = None,
        http_status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []
        self.http_status = http_status or _HTTP[status]
        self.headers = headers or {}

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {"code": self.http_status, "message": self.message, "status": self.status, "details": self.details}
        }

    def rpc_status(self) -> dict[str, Any]:
        """The same error as an Operation's `error` field (a google.rpc.Status with the rpc code)."""
        return {"code": RPC_CODES[self.status], "message": self.message, "details": self.details}


def not_found(resource: str) -> GkeApiError:
    return GkeApiError("NOT_FOUND", f"Not found: {resource}.")


def error_info(reason: str, domain: str = "container.googleapis.com", **metadata: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": domain,
        "metadata": metadata,
    }
