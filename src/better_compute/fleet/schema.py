"""The FleetConfig document (`version: 1`) as pydantic models.

The JSON keys are exactly the spec's (camelCase: `providerAccounts`, `gpuModel`,
`privateNodes`, `diskGiB`, ...). Unknown keys are refused everywhere and nothing
is coerced (`"2"` is not a node count): a document means what it says or it is
refused. Rules that need more than one field (site exists, names unique) live in
validate.py; provider vocabulary lives in each driver's `validate_substrate`. The
substrate's models (substrate, cluster, flavor, autoscaling) are the kubernetes
module's own (kubernetes/policy.py): the document embeds them as they are.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from better_compute.kubernetes.policy import (
    Autoscaling,
    Cluster,
    ClusterCreate,
    Flavor,
    Gpus,
    Name,
    ShortText,
    Substrate,
)

__all__ = [
    "Autoscaling",
    "Cluster",
    "ClusterCreate",
    "Flavor",
    "FleetDocument",
    "Gpus",
    "HealthPolicy",
    "KubernetesPolicy",
    "Policy",
    "PoolSpec",
    "ProviderAccountSpec",
    "SiteSpec",
    "Substrate",
    "json_schema",
]

Kind = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")]
"""A site kind (`shared`, `dedicated`): at most 32 characters."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False, frozen=True)


class SiteSpec(_Model):
    """A place pools live in."""

    name: Name
    kind: Kind
    region: ShortText


class ProviderAccountSpec(_Model):
    """One provider account: `config` holds the provider's own keys, checked by its driver."""

    name: Name
    provider: Name
    config: dict[str, Any] = Field(default_factory=dict)


class KubernetesPolicy(_Model):
    platform_operated: bool = Field(default=False, alias="platformOperated")


class HealthPolicy(_Model):
    """What happens to a reservation holding a GPU that bcd reports unhealthy (it is `degraded`):
    `keep` it (the default: the tenant keeps its other GPUs) or `end` it, refunding its quota."""

    degraded: Literal["keep", "end"] = "keep"


class Policy(_Model):
    kubernetes: KubernetesPolicy | None = None
    substrate: Substrate | None = None
    health: HealthPolicy | None = None


class PoolSpec(_Model):
    name: Name
    site: Name
    pool_class: Name = Field(alias="class")
    gpu_model: ShortText = Field(alias="gpuModel")
    policy: Policy = Field(default_factory=Policy)


class FleetDocument(_Model):
    """The whole desired state of one tenant's fleet."""

    version: Literal[1]
    sites: list[SiteSpec] = Field(default_factory=list)
    provider_accounts: list[ProviderAccountSpec] = Field(default_factory=list, alias="providerAccounts")
    pools: list[PoolSpec] = Field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        """The document in its own keys, defaults filled in, absent options left out."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return data


def json_schema() -> str:
    """The JSON Schema of a FleetConfig document, as `better-compute fleet schema` prints it."""
    schema = FleetDocument.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "FleetConfig"
    return json.dumps(schema, indent=2, sort_keys=True)
