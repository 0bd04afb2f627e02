"""Bearer tokens: who a request is, and until when.

A cluster trusts the opaque tokens it minted itself (`issue_token`, like a
static token file), its service-account JWTs (satokens.py) and whatever the
registered authenticators vouch for (a provider emulator registers one for the
tokens its credentials API hands out). Every token has an expiry read from the
injected clock; an expired or unknown token is a 401.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from better_compute.core.clock import Clock

__all__ = ["Authenticator", "TokenAuthority", "TokenReview"]


@dataclass(frozen=True)
class TokenReview:
    """Who a token belongs to (Kubernetes' UserInfo). `expires_at` None means it never expires."""

    subject: str
    groups: tuple[str, ...] = ("system:authenticated",)
    expires_at: datetime | None = None
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)


Authenticator = Callable[[str], TokenReview | None]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenAuthority:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._issued: dict[str, TokenReview] = {}
        self._authenticators: list[Authenticator] = []

    def issue(
        self,
        subject: str,
        ttl_seconds: float,
        groups: tuple[str, ...] = ("system:masters",),
    ) -> tuple[str, datetime]:
        """A new token for `subject`, and when it expires."""
        token = "kemu-" + secrets.token_urlsafe(32)
        expires_at = self._clock.now() + timedelta(seconds=ttl_seconds)
        review = TokenReview(subject, (*groups, "system:authenticated"), expires_at)
        self._issued[_digest(token)] = review
        return token, expires_at

    def add_authenticator(self, authenticator: Authenticator) -> None:
        self._authenticators.append(authenticator)

    def review(self, token: str) -> TokenReview | None:
        """The token's identity when it is known and not expired, else None."""
        review = self._issued.get(_digest(token))
        if review is None:
            for authenticator in self._authenticators:
                review = authenticator(token)
                if review is not None:
                    break
        if review is None:
            return None
        if review.expires_at is not None and review.expires_at <= self._clock.now():
            return None
        return review
