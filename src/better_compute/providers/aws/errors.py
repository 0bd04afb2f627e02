"""botocore's exceptions, turned into ComputeError at the driver's edge.

    ClientError code                       -> ComputeError
      ResourceNotFoundException,             NOT_FOUND
        InvalidSubnetID.NotFound, NoSuchResourceException (Service Quotas)
      ResourceInUseException                 CONFLICT (it exists, or it is busy)
      ResourceLimitExceededException         UNAVAILABLE, reason "quota"
      InsufficientInstanceCapacity           UNAVAILABLE, reason "stockout"
      ThrottlingException, Throttling,       UNAVAILABLE with retry_after
        RequestLimitExceeded, TooManyRequests
      InvalidParameterException,             INVALID_INPUT
        InvalidInstanceType
      InvalidRequestException                INVALID_STATE (EKS: "cluster is not ACTIVE", an auth mode
                                               without access entries: the request fits not the state)
      ValidationError (Auto Scaling: below    INVALID_STATE
        the group's minimum size)
      ScalingActivityInProgress,             UNAVAILABLE, reason "busy"
        ResourceContention
      AccessDeniedException,                 PERMISSION_DENIED
        UnrecognizedClientException, InvalidSignatureException, ...
      ServerException, ServiceUnavailable... UNAVAILABLE
    BotoCoreError (connection, timeout, no credentials)  UNAVAILABLE

The provider's message is kept, prefixed with the operation and the AWS code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.providers.aws.vocabulary import THROTTLE_RETRY_AFTER

__all__ = ["aws_code", "aws_errors", "to_compute_error"]

_CODES: dict[str, tuple[ErrorCode, str | None]] = {
    "ResourceNotFoundException": (ErrorCode.NOT_FOUND, None),
    "NotFoundException": (ErrorCode.NOT_FOUND, None),
    "NoSuchResourceException": (ErrorCode.NOT_FOUND, None),
    "InvalidSubnetID.NotFound": (ErrorCode.NOT_FOUND, None),
    "ResourceInUseException": (ErrorCode.CONFLICT, None),
    "ResourceLimitExceededException": (ErrorCode.UNAVAILABLE, "quota"),
    "InsufficientInstanceCapacity": (ErrorCode.UNAVAILABLE, "stockout"),
    "InvalidParameterException": (ErrorCode.INVALID_INPUT, None),
    "InvalidRequestException": (ErrorCode.INVALID_STATE, None),
    "InvalidInstanceType": (ErrorCode.INVALID_INPUT, None),
    "InvalidParameterValue": (ErrorCode.INVALID_INPUT, None),
    "AccessDeniedException": (ErrorCode.PERMISSION_DENIED, None),
    "AccessDenied": (ErrorCode.PERMISSION_DENIED, None),
    "UnauthorizedOperation": (ErrorCode.PERMISSION_DENIED, None),
    "UnrecognizedClientException": (ErrorCode.PERMISSION_DENIED, None),
    "InvalidSignatureException": (ErrorCode.PERMISSION_DENIED, None),
    "SignatureDoesNotMatch": (ErrorCode.PERMISSION_DENIED, None),
    "InvalidClientTokenId": (ErrorCode.PERMISSION_DENIED, None),
    "ExpiredToken": (ErrorCode.PERMISSION_DENIED, None),
    "ValidationError": (ErrorCode.INVALID_STATE, None),
    "ScalingActivityInProgress": (ErrorCode.UNAVAILABLE, "busy"),
    "ResourceContention": (ErrorCode.UNAVAILABLE, "busy"),
    "ServerException": (ErrorCode.UNAVAILABLE, None),
    "ServiceUnavailableException": (ErrorCode.UNAVAILABLE, None),
    "InternalError": (ErrorCode.UNAVAILABLE, None),
}
_THROTTLES = {"ThrottlingException", "Throttling", "RequestLimitExceeded", "TooManyRequestsException"}


def aws_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _retry_after(exc: ClientError) -> float:
    headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    value = headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else THROTTLE_RETRY_AFTER
    except ValueError:
        return THROTTLE_RETRY_AFTER


def to_compute_error(exc: Exception, operation: str) -> ComputeError:
    """The ComputeError for one failed SDK call."""
    if isinstance(exc, ClientError):
        code = aws_code(exc)
        message = f"{operation}: {code}: {exc.response.get('Error', {}).get('Message', '')}".rstrip(": ")
        if code in _THROTTLES:
            return ComputeError(ErrorCode.UNAVAILABLE, message, retry_after=_retry_after(exc), reason="throttled")
        mapped, reason = _CODES.get(code, (None, None))
        if mapped is None:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500))
            mapped = ErrorCode.UNAVAILABLE if status >= 500 else ErrorCode.INVALID_STATE
        return ComputeError(mapped, message, reason=reason)
    if isinstance(exc, NoCredentialsError):
        return ComputeError(ErrorCode.PERMISSION_DENIED, f"{operation}: no AWS credentials: {exc}")
    return ComputeError(ErrorCode.UNAVAILABLE, f"{operation}: {type(exc).__name__}: {exc}")


@contextmanager
def aws_errors(operation: str) -> Iterator[None]:
    """Run SDK calls; any botocore error leaves as a ComputeError."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise to_compute_error(exc, operation) from exc
