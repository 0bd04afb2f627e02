"""The DigitalOcean provider account's `config`, as a model: the API `token` (a secret
reference, the only place a secret may be), the `regions` it may use, and the Spot preview opt-in."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from better_compute.providers.digitalocean.vocabulary import REGIONS
from better_compute.vps.provider import AccountConfig, SecretRef

__all__ = ["DoksAccountConfig"]


def _known_region(region: str) -> str:
    if region not in REGIONS:
        raise ValueError(f"{region[:16]!r} is not a DOKS region (like tor1)")
    return region


Region = Annotated[str, Field(max_length=16), AfterValidator(_known_region)]


class DoksAccountConfig(AccountConfig):
    token: SecretRef
    regions: Annotated[list[Region], Field(min_length=1, max_length=32)] | None = None
    allowSpot: bool = False
    previews: bool | Annotated[list[Annotated[str, Field(max_length=32)]], Field(max_length=16)] = False
