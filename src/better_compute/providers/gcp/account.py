"""The GKE provider account's `config`, as a model: `projectId`, the `zones` node pools may use, and the
`serviceAccount` whose 600 s tokens (IAM Credentials `generateAccessToken`) reach the clusters."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from better_compute.providers.gcp.vocabulary import is_zone
from better_compute.vps.provider import AccountConfig

__all__ = ["GkeAccountConfig"]

ProjectId = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")]
ServiceAccount = Annotated[
    str, Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$")
]


def _known_zone(zone: str) -> str:
    if not is_zone(zone):
        raise ValueError(f"{zone[:32]!r} is not a GKE zone (like us-central1-a)")
    return zone


Zone = Annotated[str, Field(max_length=64), AfterValidator(_known_zone)]


class GkeAccountConfig(AccountConfig):
    projectId: ProjectId
    zones: Annotated[list[Zone], Field(max_length=64)] = []
    serviceAccount: ServiceAccount | None = None
