"""The Google identity the GKE emulator serves: the OAuth token endpoint, IAM Credentials' generateAccessToken,
and the review and authorization of those tokens by each cluster's API server."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from typing import Any

from google.oauth2.credentials import Credentials

from better_compute.testing.gke.errors import GkeApiError
from better_compute.testing.gke.registry import GkeRegistry
from better_compute.testing.kube import Attributes, TokenReview

__all__ = ["IDENTITY", "SCOPE", "TOKEN_LIFETIME_SECONDS", "GoogleIdentity"]

TOKEN_LIFETIME_SECONDS = 3600
"""Google's OAuth access tokens live an hour; so does generateAccessToken's default and its maximum."""
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
IDENTITY = "better-compute@emulated-project.iam.gserviceaccount.com"

_SERVICE_ACCOUNT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$")
"""A service account of a project, as generateAccessToken names it."""


class GoogleIdentity(GkeRegistry):
    """Google access tokens: minted, checked by the emulator, and reviewed by its clusters' API servers."""

    def google_credentials(self) -> Credentials:
        """OAuth2 user credentials whose refresh mints an access token at this emulator's token endpoint."""
        return Credentials(  # type: ignore[no-untyped-call]
            token=None,
            refresh_token=self._refresh_token,
            token_uri=f"{self.url}/token",
            client_id="emulator-client",
            client_secret="emulator-secret",
            scopes=[SCOPE],
        )

    def mint_token(self, refresh_token: str) -> dict[str, Any]:
        if refresh_token != self._refresh_token:
            raise GkeApiError("UNAUTHENTICATED", "invalid_grant: Bad Request")
        token = "ya29.emu-" + secrets.token_urlsafe(32)
        self._tokens[token] = (IDENTITY, self.clock.now() + timedelta(seconds=TOKEN_LIFETIME_SECONDS))
        self.issued.append(token)
        return {"access_token": token, "expires_in": TOKEN_LIFETIME_SECONDS, "scope": SCOPE, "token_type": "Bearer"}

    def generate_access_token(self, authorization: str | None, account: str, body: Any) -> dict[str, Any]:
        """iamcredentials v1 `projects/-/serviceAccounts/{account}:generateAccessToken`: a token of a
        service account of the project, valid `lifetime` ("600s"; 1 h when absent, 1 h at most)."""
        self.authenticate(authorization)
        if not _SERVICE_ACCOUNT.match(account):
            raise GkeApiError("NOT_FOUND", f"Service account projects/-/serviceAccounts/{account} not found.")
        lifetime = (body or {}).get("lifetime") if isinstance(body, dict) else None
        seconds = TOKEN_LIFETIME_SECONDS
        if lifetime is not None:
            match = re.fullmatch(r"(\d+)(?:\.\d+)?s", str(lifetime))
            if match is None or not 1 <= int(match[1]) <= TOKEN_LIFETIME_SECONDS:
                raise GkeApiError(
                    "INVALID_ARGUMENT",
                    f"Invalid value at 'lifetime' ({lifetime}): the lifetime must be between 1s and 3600s",
                )
            seconds = int(match[1])
        if not (body or {}).get("scope"):
            raise GkeApiError("INVALID_ARGUMENT", "Scope required.")
        token = "ya29.emu-sa-" + secrets.token_urlsafe(32)
        expires = self.clock.now() + timedelta(seconds=seconds)
        self._tokens[token] = (account, expires)
        self.issued.append(token)
        return {"accessToken": token, "expireTime": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def authenticate(self, authorization: str | None) -> None:
        token = (authorization or "").removeprefix("Bearer ").strip()
        if token not in self._tokens:  # the SDK refreshes by the wall clock, which the emulator's need not follow
            raise GkeApiError(
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential.",
            )

    def _review(self, token: str) -> TokenReview | None:
        """What a cluster's API server learns of a bearer token: a Google identity of this project."""
        held = self._tokens.get(token)
        if held is None:
            return None
        subject, expires = held
        return TokenReview(subject=subject, groups=("system:authenticated",), expires_at=expires)

    @staticmethod
    def _authorize(user: TokenReview, attributes: Attributes) -> str | None:
        """GKE's IAM authorizer (after RBAC): the project's owner, and its service accounts (granted
        roles/container.admin), may do anything in its clusters."""
        if user.subject == IDENTITY:
            return "GKE IAM: roles/owner on the project"
        return "GKE IAM: roles/container.admin on the project" if _SERVICE_ACCOUNT.match(user.subject) else None
