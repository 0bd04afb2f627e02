"""The EKS cluster token: `k8s-aws-v1.` + the urlsafe base64 (no padding) of a
presigned STS GetCallerIdentity URL that also signs `x-k8s-aws-id: <cluster name>`.

botocore's SigV4QueryAuth does the signing (canonical request, scope, key
derivation). The one thing changed is where the signing time comes from: the
driver's injected clock instead of the wall, so that a simulated clock and the
emulator's 15-minute check agree, and tests of expiry are exact.
"""

from __future__ import annotations

import base64
from datetime import datetime

from botocore.auth import SIGV4_TIMESTAMP, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from better_compute.providers.aws.vocabulary import STS_PRESIGN_SECONDS, TOKEN_PREFIX

__all__ = ["cluster_token", "presigned_caller_identity_url"]


class _PresignAt(SigV4QueryAuth):
    """SigV4 query signing at a given time (botocore's `add_auth` reads the wall clock)."""

    def __init__(self, credentials: ReadOnlyCredentials, region: str, signed_at: datetime) -> None:
        super().__init__(credentials, "sts", region, expires=STS_PRESIGN_SECONDS)
        self._signed_at = signed_at

    def add_auth(self, request: AWSRequest) -> None:
        request.context["timestamp"] = self._signed_at.strftime(SIGV4_TIMESTAMP)
        self._modify_request_before_signing(request)  # type: ignore[attr-defined]  # botocore's, untyped in its stubs
        canonical = self.canonical_request(request)
        signature = self.signature(self.string_to_sign(request, canonical), request)
        self._inject_signature_to_request(request, signature)  # type: ignore[attr-defined]


def presigned_caller_identity_url(
    credentials: ReadOnlyCredentials, *, sts_endpoint: str, region: str, cluster_name: str, signed_at: datetime
) -> str:
    request = AWSRequest(
        method="GET",
        url=f"{sts_endpoint.rstrip('/')}/",
        params={"Action": "GetCallerIdentity", "Version": "2011-06-15"},
        headers={"x-k8s-aws-id": cluster_name},
    )
    _PresignAt(credentials, region, signed_at).add_auth(request)
    return str(request.url)


def cluster_token(
    credentials: ReadOnlyCredentials, *, sts_endpoint: str, region: str, cluster_name: str, signed_at: datetime
) -> str:
    url = presigned_caller_identity_url(
        credentials, sts_endpoint=sts_endpoint, region=region, cluster_name=cluster_name, signed_at=signed_at
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
