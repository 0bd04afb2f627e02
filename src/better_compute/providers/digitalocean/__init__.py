"""The DigitalOcean provider: DOKS clusters and node pools through pydo.

    from better_compute.providers.digitalocean import digitalocean_provider
    providers = [digitalocean_provider()]                       # api.digitalocean.com
    providers = [digitalocean_provider(endpoint=emulator.url)]  # a loopback emulator

The account config holds `token` (a `secret://` reference, resolved per call and
never stored or logged), optionally `regions`, and `allowSpot` with `previews` for
DigitalOcean's Spot preview.
"""

from __future__ import annotations

from better_compute.core.clock import Clock, SystemClock
from better_compute.providers.digitalocean.account import DoksAccountConfig
from better_compute.providers.digitalocean.client import DoApi
from better_compute.providers.digitalocean.driver import DoksKubernetes
from better_compute.providers.digitalocean.vocabulary import PROVIDER, VOCABULARY
from better_compute.vps.provider import ProviderImpl

__all__ = ["VOCABULARY", "DoksAccountConfig", "DoksKubernetes", "digitalocean_provider"]


def digitalocean_provider(
    *, endpoint: str | None = None, max_workers: int = 8, clock: Clock | None = None
) -> ProviderImpl:
    """DigitalOcean as a provider definition; `endpoint` points pydo elsewhere (an emulator), `max_workers`
    bounds the driver's thread pool, `clock` turns a `ratelimit-reset` into a retry delay."""
    api = DoApi(endpoint, max_workers=max_workers)
    return ProviderImpl(
        name=PROVIDER, kubernetes=DoksKubernetes(api, clock or SystemClock()), account_config=DoksAccountConfig
    )
