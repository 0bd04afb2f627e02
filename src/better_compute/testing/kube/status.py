"""Kubernetes `Status` failures, shaped as the real API server writes them.

Clients branch on `reason` and `code` (kubectl prints `message`; lightkube raises
`ApiError` carrying the Status), so these bodies copy the server's wording.
"""

from __future__ import annotations

from typing import Any

from better_compute.testing.kube.resources import ResourceType

__all__ = ["KubeError", "success_status"]


def _qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


class KubeError(Exception):
    """A request the emulator refuses; `body()` is the Status it answers with."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    @classmethod
    def not_found(cls, rt: ResourceType, name: str) -> KubeError:
        return cls(
            404,
            "NotFound",
            f'{_qualified(rt)} "{name}" not found',
            _details(rt, name),
        )

    @classmethod
    def already_exists(cls, rt: ResourceType, name: str) -> KubeError:
        return cls(409, "AlreadyExists", f'{_qualified(rt)} "{name}" already exists', _details(rt, name))

    @classmethod
    def stale(cls, rt: ResourceType, name: str) -> KubeError:
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {_qualified(rt)} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            _details(rt, name),
        )

    @classmethod
    def invalid(cls, rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> KubeError:
        message = "; ".join(f"{field}: {text}" for field, text in causes)
        details = _details(rt, name)
        details["causes"] = [{"reason": "FieldValueInvalid", "message": text, "field": f} for f, text in causes]
        return cls(422, "Invalid", f'{rt.kind} "{name}" is invalid: {message}', details)

    @classmethod
    def bad_request(cls, message: str) -> KubeError:
        return cls(400, "BadRequest", message)

    @classmethod
    def unauthorized(cls) -> KubeError:
        return cls(401, "Unauthorized", "Unauthorized")

    @classmethod
    def forbidden(cls, message: str, rt: ResourceType | None = None, name: str = "") -> KubeError:
        return cls(403, "Forbidden", message, _details(rt, name) if rt else None)

    @classmethod
    def path_not_found(cls) -> KubeError:
        return cls(404, "NotFound", "the server could not find the requested resource", None)

    @classmethod
    def method_not_allowed(cls, method: str) -> KubeError:
        return cls(
            405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"
        )

    @classmethod
    def unsupported_media(cls, content_type: str) -> KubeError:
        return cls(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")


def _details(rt: ResourceType | None, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rt is not None:
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
    return details


def success_status(rt: ResourceType, name: str, uid: str) -> dict[str, Any]:
    """What a DELETE answers when the object is gone at once."""
    details = _details(rt, name)
    details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
