"""The DigitalOcean provider account's `config`, as a model: the API `token` (a secret
reference, the only place a secret may be), the `regions` it may use, and the Spot preview opt-in."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from better_compute.providers.digitalocean.vocabulary import REGIONS
from better_compute.vps.provider import AccountConfig, SecretRef

__all__ = ["DoksAccountConfig"]


class DoksAccountConfig(AccountConfig):
    token: SecretRef
    regions: Annotated[list[Annotated[str, Field(max_length=16)]], Field(min_length=1, max_length=32)] | None = None
    allowSpot: bool = False
    previews: bool | Annotated[list[Annotated[str, Field(max_length=32)]], Field(max_length=16)] = False

    @field_validator("regions")
    @classmethod
    def _known_regions(cls, regions: list[str] | None) -> list[str] | None:
        unknown = [region for region in regions or () if region not in REGIONS]
        if unknown:
            raise ValueError(f"{', '.join(repr(r[:16]) for r in unknown[:3])} is not a DOKS region (like tor1)")
        return regions
