"""Join tokens and node credentials are stored only as their SHA-256.

Both are 256-bit random values (`new_token`), so a plain digest is enough: it cannot be
reversed or guessed, and it lets a lookup by hash find the row without a scan.
"""

from __future__ import annotations

import hashlib

__all__ = ["digest"]


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
