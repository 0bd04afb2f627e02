"""The serving control plane's doctor, asked over HTTP (`GET /v1/doctor` with an API key).

A CLI process builds its own Compute from its own environment: its self-check is about
that process (no BC_BCD_IMAGE here says nothing of the server's agent). So `doctor`
asks the server at BC_BASE_URL when BC_API_KEY is set, and says plainly when it could
only check itself.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

import httpx

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.findings import Finding

__all__ = ["ServerAddress", "server_address", "server_findings"]

TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class ServerAddress:
    base_url: str
    api_key: str
    ca_file: str | None


def server_address() -> ServerAddress | None:
    """Where the server is and the key to ask it with; None without BC_API_KEY."""
    key = os.environ.get("BC_API_KEY", "").strip()
    if not key:
        return None
    base_url = os.environ.get("BC_BASE_URL", "http://127.0.0.1:8080").rstrip("/")
    return ServerAddress(base_url, key, os.environ.get("BC_CONTROL_PLANE_CA_FILE") or None)


def server_findings(address: ServerAddress) -> list[Finding] | None:
    """The server's findings for the key's tenant; None when nothing answers at the address."""
    verify: ssl.SSLContext | bool = True
    if address.ca_file:
        verify = ssl.create_default_context(cafile=address.ca_file)
    try:
        with httpx.Client(base_url=address.base_url, verify=verify, timeout=TIMEOUT_SECONDS) as client:
            response = client.get("/v1/doctor", headers={"Authorization": f"Bearer {address.api_key}"})
    except httpx.TransportError:
        return None
    body = _json(response)
    if response.status_code != 200:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = ErrorCode(error["code"]) if error.get("code") in set(ErrorCode) else ErrorCode.UNAVAILABLE
            where = "/BC_API_KEY" if code is ErrorCode.PERMISSION_DENIED else None
            raise ComputeError(code, f"the server at {address.base_url} answered: {error['message']}", where)
        raise ComputeError(
            ErrorCode.UNAVAILABLE, f"the server at {address.base_url} answered HTTP {response.status_code}"
        )
    findings = body.get("findings") if isinstance(body, dict) else None
    if not isinstance(findings, list):
        raise ComputeError(ErrorCode.UNAVAILABLE, f"{address.base_url}/v1/doctor did not answer findings")
    return [Finding(str(f["code"]), f["severity"], str(f["message"])) for f in findings]


def _json(response: httpx.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return None
