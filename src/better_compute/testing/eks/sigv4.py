"""Checking AWS Signature Version 4 the way AWS does, with botocore's own signer.

A request is rebuilt from what came over the wire (method, raw path, query, the
headers the client says it signed, the body) and signed again with the secret
of the access key it names; the two signatures must match. The same is done for
a presigned URL (the query carries the signature). Nothing here trusts the
client's clock: the caller compares `timestamp` with its own.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl, quote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

__all__ = ["SignatureError", "SignedBy", "verify_header_signature", "verify_presigned"]

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<headers>[a-z0-9;-]+),\s*Signature=(?P<sig>[0-9a-f]{64})$"
)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


class SignatureError(Exception):
    """The request is not signed, or not signed right. `code` is the AWS error code to answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SignedBy:
    """Who signed, for which region and service, and when (the signer's own clock)."""

    access_key_id: str
    region: str
    service: str
    timestamp: datetime
    signed_headers: tuple[str, ...]


def _parse_amz_date(value: str) -> datetime:
    try:
        return datetime.strptime(value, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError as exc:
        raise SignatureError("IncompleteSignature", f"malformed X-Amz-Date {value!r}") from exc


def _signature(
    secret_for: Mapping[str, str],
    *,
    access_key_id: str,
    region: str,
    service: str,
    amz_date: str,
    method: str,
    url: str,
    params: list[tuple[str, str]],
    headers: Mapping[str, str],
    body: bytes,
) -> str:
    secret = secret_for.get(access_key_id)
    if secret is None:
        raise SignatureError("UnrecognizedClientException", "The security token included in the request is invalid.")
    signer = SigV4Auth(Credentials(access_key_id, secret), service, region)
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in params)
    request = AWSRequest(method=method, url=f"{url}?{query}" if query else url, headers=dict(headers), data=body)
    request.context["timestamp"] = amz_date
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))


def verify_header_signature(
    secret_for: Mapping[str, str],
    *,
    method: str,
    scheme: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
) -> SignedBy:
    """Check the `Authorization` header of one request; `headers` have lower-case names."""
    auth = headers.get("authorization")
    if not auth:
        raise SignatureError("MissingAuthenticationTokenException", "Missing Authentication Token")
    match = _AUTH.match(auth.strip())
    if match is None:
        raise SignatureError("IncompleteSignature", "Authorization header is not a SigV4 AWS4-HMAC-SHA256 signature")
    signed = tuple(match["headers"].split(";"))
    if "host" not in signed:
        raise SignatureError("IncompleteSignature", "the host header must be signed")
    missing = [h for h in signed if h not in headers]
    if missing:
        raise SignatureError("IncompleteSignature", f"signed headers missing from the request: {missing}")
    amz_date = headers.get("x-amz-date", "")
    when = _parse_amz_date(amz_date)
    if amz_date[:8] != match["date"]:
        raise SignatureError("SignatureDoesNotMatch", "the credential scope date is not the X-Amz-Date day")
    expected = _signature(
        secret_for,
        access_key_id=match["key"],
        region=match["region"],
        service=match["service"],
        amz_date=amz_date,
        method=method,
        url=f"{scheme}://{headers['host']}{raw_path}",
        params=parse_qsl(query, keep_blank_values=True),
        headers={h: headers[h] for h in signed},
        body=body,
    )
    if not hmac.compare_digest(expected, match["sig"]):
        raise SignatureError(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided.",
        )
    return SignedBy(match["key"], match["region"], match["service"], when, signed)


def verify_presigned(
    secret_for: Mapping[str, str],
    *,
    url: str,
    extra_headers: Mapping[str, str],
) -> tuple[SignedBy, int]:
    """Check a presigned GET URL, adding the headers the verifier knows were signed
    (`x-k8s-aws-id`). Answers who signed it and its `X-Amz-Expires`."""
    scheme, _, rest = url.partition("://")
    host, _, path_query = rest.partition("/")
    path, _, query = ("/" + path_query).partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    values = dict(pairs)
    try:
        credential = values["X-Amz-Credential"]
        amz_date = values["X-Amz-Date"]
        signed = tuple(values["X-Amz-SignedHeaders"].split(";"))
        signature = values["X-Amz-Signature"]
        expires = int(values["X-Amz-Expires"])
    except (KeyError, ValueError) as exc:
        raise SignatureError("IncompleteSignature", f"presigned URL lacks {exc}") from exc
    if values.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise SignatureError("IncompleteSignature", "presigned URL is not AWS4-HMAC-SHA256")
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise SignatureError("IncompleteSignature", f"malformed X-Amz-Credential {credential!r}")
    key, day, region, service, _ = parts
    when = _parse_amz_date(amz_date)
    if amz_date[:8] != day:
        raise SignatureError("SignatureDoesNotMatch", "the credential scope date is not the X-Amz-Date day")
    headers = {"host": host, **{k.lower(): v for k, v in extra_headers.items()}}
    if set(signed) != set(headers):
        raise SignatureError("SignatureDoesNotMatch", f"signed headers {sorted(signed)}, expected {sorted(headers)}")
    expected = _signature(
        secret_for,
        access_key_id=key,
        region=region,
        service=service,
        amz_date=amz_date,
        method="GET",
        url=f"{scheme}://{host}{path}",
        params=[(k, v) for k, v in pairs if k != "X-Amz-Signature"],
        headers=headers,
        body=b"",
    )
    if not hmac.compare_digest(expected, signature):
        raise SignatureError("SignatureDoesNotMatch", "the presigned URL's signature does not match")
    return SignedBy(key, region, service, when, signed), expires
