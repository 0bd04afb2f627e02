"""The GKE provider: `gcp_provider()` for `vps(providers=...)` and `kubernetes(providers=...)`."""

from __future__ import annotations

import google.auth.credentials

from better_compute.core.clock import Clock
from better_compute.providers.gcp.account import GkeAccountConfig
from better_compute.providers.gcp.driver import GkeKubernetes
from better_compute.providers.gcp.vocabulary import VOCABULARY
from better_compute.vps.provider import ProviderImpl

__all__ = ["VOCABULARY", "GkeAccountConfig", "GkeKubernetes", "gcp_provider"]


def gcp_provider(
    *,
    endpoint: str | None = None,
    credentials: google.auth.credentials.Credentials | None = None,
    max_workers: int = 8,
    clock: Clock | None = None,
) -> ProviderImpl:
    """GKE through google-cloud-container's REST transport.

    `endpoint` overrides container.googleapis.com (an emulator's `http://127.0.0.1:<port>`);
    `credentials` default to Google's application default credentials (scope cloud-platform);
    `clock` dates the 600 s cluster credentials (the system clock by default).
    """
    return ProviderImpl(
        name="gcp",
        kubernetes=GkeKubernetes(endpoint=endpoint, credentials=credentials, max_workers=max_workers, clock=clock),
        account_config=GkeAccountConfig,
    )
