"""The FleetConfig document (`version: 1`) as pydantic models.

The JSON keys are exactly the spec's (camelCase: `providerAccounts`, `gpuModel`,
`privateNodes`, `diskGiB`, ...). Unknown keys are refused everywhere and nothing
is coerced (`"2"` is not a node count): a document means what it says or it is
refused. Rules that need more than one field (site exists, names unique) live in
validate.py; provider vocabulary lives in each driver's `validate_substrate`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

__all__ = [
    "Autoscaling",
    "Cluster",
    "ClusterCreate",
    "Flavor",
    "FleetDocument",
    "Gpus",
    "KubernetesPolicy",
    "Policy",
    "PoolSpec",
    "ProviderAccountSpec",
    "SiteSpec",
    "Substrate",
    "json_schema",
]

Name = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"),
]
"""A DNS-label name: lower-case letters, digits and dashes, at most 63 characters."""

FlavorName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$")]
"""Short, because it ends up in provider node pool names (`bc-<6>-<flavor>`)."""

Text = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^\S+$")]
"""A non-empty token without spaces: a region, a machine type, an accelerator, a cluster id."""

ShortText = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^\S+$")]
"""A region or a GPU model: what compute stores in 64 characters."""

Kind = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")]
"""A site kind (`shared`, `dedicated`): at most 32 characters."""

LabelKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
    ),
]
LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")]

RESERVED_LABEL_PREFIXES = ("better-compute.dev/", "bc.dev/")
"""Label prefixes the system sets itself; a flavor may not claim them."""


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


class ClusterCreate(_Model):
    location: Text
    private_nodes: bool = Field(default=False, alias="privateNodes")


class Cluster(_Model):
    """Exactly one of `create` (better-compute makes the cluster) or `adopt` (a provider cluster id)."""

    create: ClusterCreate | None = None
    adopt: Text | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Cluster:
        if (self.create is None) == (self.adopt is None):
            raise ValueError("give exactly one of `create` or `adopt`")
        return self


class Gpus(_Model):
    type: Text
    count: int = Field(ge=1, le=64)


class Autoscaling(_Model):
    min_nodes: int = Field(alias="minNodes", ge=0, le=10_000)
    max_nodes: int = Field(alias="maxNodes", ge=1, le=10_000)

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_nodes > self.max_nodes:
            raise ValueError("minNodes is greater than maxNodes")
        return self


class Flavor(_Model):
    """One node shape: a node pool at the provider."""

    name: FlavorName
    machine_type: Text = Field(alias="machineType")
    nodes: int = Field(ge=0, le=10_000)
    gpus: Gpus | None = None
    zones: list[Text] | None = Field(default=None, min_length=1)
    disk_gib: int | None = Field(default=None, alias="diskGiB", ge=10, le=65_536)
    spot: bool = False
    autoscaling: Autoscaling | None = None
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)

    @model_validator(mode="after")
    def _consistent(self) -> Flavor:
        if self.autoscaling is not None and not (
            self.autoscaling.min_nodes <= self.nodes <= self.autoscaling.max_nodes
        ):
            raise ValueError("nodes must lie between autoscaling.minNodes and autoscaling.maxNodes")
        reserved = sorted(k for k in self.labels if k.startswith(RESERVED_LABEL_PREFIXES))
        if reserved:
            raise ValueError(f"labels {', '.join(reserved)} use a prefix the system sets itself")
        if self.zones is not None and len(set(self.zones)) != len(self.zones):
            raise ValueError("zones are listed twice")
        return self


class Substrate(_Model):
    """The managed Kubernetes cluster behind a pool, provider-neutral."""

    kind: Literal["kubernetes"]
    account: Name
    cluster: Cluster
    flavors: list[Flavor] = Field(min_length=1, max_length=32)


class Policy(_Model):
    kubernetes: KubernetesPolicy | None = None
    substrate: Substrate | None = None


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
