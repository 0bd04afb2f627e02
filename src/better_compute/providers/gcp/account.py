"""The GKE provider account's `config`, as a model: `projectId`, and the `zones` node pools may use."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from better_compute.providers.gcp.vocabulary import is_zone
from better_compute.vps.provider import AccountConfig

__all__ = ["GkeAccountConfig"]

ProjectId = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")]


class GkeAccountConfig(AccountConfig):
    projectId: ProjectId
    zones: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=64)] = []

    @field_validator("zones")
    @classmethod
    def _known_zones(cls, zones: list[str]) -> list[str]:
        unknown = [zone for zone in zones if not is_zone(zone)]
        if unknown:
            raise ValueError(f"{', '.join(repr(z[:32]) for z in unknown[:3])} is not a GKE zone (like us-central1-a)")
        return zones
