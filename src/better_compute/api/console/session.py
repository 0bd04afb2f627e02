"""The console's session cookie: a signed reference to the API key signed in with, never the key.

The cookie holds the tenant id, the key's id, an expiry on the injected clock and a random
nonce, signed with HMAC-SHA256 under a key derived (HKDF) from the server secret: any
replica of `serve` reads it, none stores it. Every request checks the signature and the
expiry, then that the key is still live (a revoked key ends its sessions at once). The CSRF
token a form posts back is an HMAC of the nonce, so only a page this session rendered has it.

Sign-in has its own CSRF token, against login CSRF (a foreign page posting the attacker's key so
that the victim works in the attacker's tenant): the sign-in form sets a pre-session cookie with
a random nonce, and the form carries an HMAC of it. A cross-site post carries no SameSite=Strict
cookie, so it cannot sign anyone in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import timedelta

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from better_compute.core.errors import ComputeError
from better_compute.server import Compute

__all__ = ["COOKIE", "LIFETIME", "SIGN_IN_COOKIE", "SIGN_IN_LIFETIME", "Session", "Sessions"]

COOKIE = "bc_console"
LIFETIME = timedelta(hours=8)
SIGN_IN_COOKIE = "bc_console_sign_in"
SIGN_IN_LIFETIME = timedelta(hours=1)
_INFO = b"better-compute/console-session/v1"


@dataclass(frozen=True)
class Session:
    tenant_id: str
    key_id: str
    csrf: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    """Issues and opens session cookies for one Compute."""

    def __init__(self, compute: Compute) -> None:
        self.compute = compute
        self._key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(compute.secret.encode())

    def _mac(self, purpose: bytes, payload: bytes) -> bytes:
        return hmac.new(self._key, purpose + b"\0" + payload, hashlib.sha256).digest()

    @staticmethod
    def sign_in_nonce() -> str:
        """A new pre-session nonce for each form rendered: one a browser was handed is never reused."""
        return _b64(secrets.token_bytes(16))

    def sign_in_token(self, nonce: str) -> str:
        """The token the sign-in form carries for the pre-session cookie `nonce`."""
        return _b64(self._mac(b"sign-in", nonce.encode()))

    def sign_in_allowed(self, cookie: str | None, token: str) -> bool:
        """Whether a sign-in post comes from a form this server gave the same browser."""
        return bool(cookie) and hmac.compare_digest(token.encode(), self.sign_in_token(cookie or "").encode())

    def issue(self, tenant_id: str, key_id: str) -> str:
        expires = int((self.compute.clock.now() + LIFETIME).timestamp())
        payload = json.dumps({"t": tenant_id, "k": key_id, "e": expires, "n": _b64(secrets.token_bytes(16))}).encode()
        return f"{_b64(payload)}.{_b64(self._mac(b'session', payload))}"

    async def open(self, cookie: str | None) -> Session | None:
        """The session the cookie stands for, or None (absent, forged, expired, or its key revoked)."""
        if not cookie or "." not in cookie:
            return None
        body, _, mac = cookie.partition(".")
        try:
            payload = _unb64(body)
            valid = hmac.compare_digest(_unb64(mac), self._mac(b"session", payload))
            fields = json.loads(payload) if valid else None
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(fields, dict) or fields.get("e", 0) <= self.compute.clock.now().timestamp():
            return None
        tenant_id, key_id, nonce = str(fields["t"]), str(fields["k"]), str(fields["n"])
        try:
            keys = await self.compute.iam.list_api_keys(tenant_id)
        except ComputeError:  # the tenant is gone
            return None
        if not any(k.id == key_id and k.revoked_at is None for k in keys):
            return None
        return Session(tenant_id, key_id, _b64(self._mac(b"csrf", nonce.encode())))
