"""An AWS API error as the emulator answers it, whichever protocol carries it."""

from __future__ import annotations

__all__ = ["AwsError"]


class AwsError(Exception):
    """`code` is the AWS error code (`ResourceInUseException`), `status` the HTTP status,
    `fields` extra members of an EKS error body (`clusterName`, `nodegroupName`)."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int = 400,
        *,
        fields: dict[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.fields = fields or {}
        self.retry_after = retry_after
