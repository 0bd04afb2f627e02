"""Identifiers: a short prefix that says what it is, then 26 random base32 characters."""

from __future__ import annotations

import base64
import secrets

__all__ = ["new_id", "new_token"]


def new_id(prefix: str) -> str:
    raw = base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()
    return f"{prefix}_{raw}"


def new_token(prefix: str, nbytes: int = 32) -> str:
    """A secret value (API key, join token): prefix plus urlsafe random bytes."""
    return f"{prefix}_{secrets.token_urlsafe(nbytes)}"
