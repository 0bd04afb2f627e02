"""A pool's `policy.substrate`, typed: the one form a flavor takes from the document to the provider call.

FleetConfig embeds these models in its document (fleet imports kubernetes, never the
reverse), the pool row stores their JSON, and the substrate reads that JSON back through
`parse_substrate`, once, into the same models. The rules that decide what a change means
live here as methods: a substrate's identity (its account and its cluster's place) never
changes in place, and a flavor's shape never does either; its size does.

The JSON keys are the spec's (camelCase); unknown keys are refused and nothing is coerced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from better_compute.core.errors import ComputeError, Problem
from better_compute.kubernetes.names import CAPACITY_LABEL, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import Accelerators, ClusterSpec, NodePoolSpec, adopted_node_pool_name
from better_compute.kubernetes.provider import Autoscaling as Scaling

__all__ = [
    "RESERVED_LABEL_PREFIXES",
    "SHAPE_KEYS",
    "Autoscaling",
    "BookedNodes",
    "Cluster",
    "ClusterCreate",
    "Disruption",
    "Flavor",
    "FlavorName",
    "Gpus",
    "Name",
    "ShortText",
    "Substrate",
    "Text",
    "parse_substrate",
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

LabelKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
    ),
]
LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")]

RESERVED_LABEL_PREFIXES = ("better-compute.dev/", "bc.dev/")
"""Label prefixes the system sets itself; a flavor may not claim them."""

SHAPE_KEYS = ("machineType", "gpus", "zones", "diskGiB", "spot")
"""A flavor's keys that no provider changes on a node pool in place, in the order plans name them."""

_IDENTITY_RULE = "the account and the cluster's place are the substrate's identity and never change in place"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False, frozen=True)


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


BookedNodes = Literal["wait", "refuse", "end"]
"""What a shrink does with a booked Node it must take: `wait` for its bookings to end (cordoned),
`refuse` the change, or `end` the bookings."""


class Disruption(_Model):
    """How far a change may disturb bookings. A shrink of a flavor without `autoscaling` picks the
    Nodes that go itself, free ones first; `bookedNodes` says what happens when it can only be met
    by taking a booked Node: the default `wait` cordons it and removes it once its bookings end."""

    booked_nodes: BookedNodes = Field(default="wait", alias="bookedNodes")


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

    def _shape(self) -> dict[str, object]:
        return {
            "machineType": self.machine_type,
            "gpus": self.gpus,
            "zones": self.zones,
            "diskGiB": self.disk_gib,
            "spot": self.spot,
        }

    def reshaped(self, new: Flavor) -> list[str]:
        """The shape keys (`SHAPE_KEYS`) `new` changes: a node pool cannot follow them in place;
        an empty list means the change (size, bounds, labels) can be made in place."""
        was, will = self._shape(), new._shape()
        return [key for key in SHAPE_KEYS if was[key] != will[key]]

    def node_pool(self, pool_id: str) -> NodePoolSpec:
        """The node pool this flavor asks the provider for, named and labelled for its pool."""
        labels = {SUBSTRATE_POOL_LABEL: pool_id, **self.labels}
        if self.spot:
            labels[CAPACITY_LABEL] = "spot"
        return NodePoolSpec(
            name=adopted_node_pool_name(pool_id, self.name),
            machine_type=self.machine_type,
            node_count=self.nodes,
            labels=labels,
            accelerators=Accelerators(self.gpus.type, self.gpus.count) if self.gpus else None,
            spot=self.spot,
            zones=tuple(self.zones or ()),
            disk_gib=self.disk_gib,
            autoscaling=Scaling(self.autoscaling.min_nodes, self.autoscaling.max_nodes) if self.autoscaling else None,
        )


class Substrate(_Model):
    """The managed Kubernetes cluster behind a pool, provider-neutral."""

    kind: Literal["kubernetes"]
    account: Name
    cluster: Cluster
    flavors: list[Flavor] = Field(min_length=1, max_length=32)
    disruption: Disruption | None = None

    @property
    def booked_nodes(self) -> BookedNodes:
        """`disruption.bookedNodes`, `wait` when the document leaves it out."""
        return self.disruption.booked_nodes if self.disruption is not None else "wait"

    @property
    def mode(self) -> Literal["create", "adopt"]:
        return "adopt" if self.cluster.adopt is not None else "create"

    def identity(self) -> dict[str, str | bool]:
        """What never changes in place, keyed by its place under `policy.substrate`."""
        identity: dict[str, str | bool] = {"account": self.account}
        if self.cluster.adopt is not None:
            identity["cluster.adopt"] = self.cluster.adopt
        elif self.cluster.create is not None:
            identity["cluster.create.location"] = self.cluster.create.location
            identity["cluster.create.privateNodes"] = self.cluster.create.private_nodes
        return identity

    def identity_change(self, new: Substrate) -> str | None:
        """Why `new` cannot replace this substrate in place, or None when its identity holds."""
        if self.mode != new.mode:
            how = (
                "adopts a cluster instead of creating one"
                if new.mode == "adopt"
                else "creates a cluster instead of adopting one"
            )
            return f"the substrate {how}: its cluster is its identity"
        was, will = self.identity(), new.identity()
        for key in sorted(was):
            if was[key] != will.get(key):
                return f"policy.substrate.{key} changes {json.dumps(was[key])} → {json.dumps(will.get(key))}: {_IDENTITY_RULE}"
        return None

    def reshaped(self, new: Substrate) -> list[tuple[str, list[str]]]:
        """Each flavor kept by name whose shape `new` changes, with the keys that change."""
        before = {f.name: f for f in self.flavors}
        moved = [(f.name, before[f.name].reshaped(f)) for f in new.flavors if f.name in before]
        return [(name, keys) for name, keys in moved if keys]

    def adopted(self) -> tuple[str, str] | None:
        """(account, provider cluster id) of an adopted cluster: one cluster backs one pool."""
        return (self.account, self.cluster.adopt) if self.cluster.adopt is not None else None

    def cluster_spec(self, name: str, pool_id: str) -> ClusterSpec | None:
        """The cluster to create (None when adopting), named `name` and labelled for its pool."""
        create = self.cluster.create
        if create is None:
            return None
        return ClusterSpec(
            name=name,
            location=create.location,
            private_nodes=create.private_nodes,
            labels={SUBSTRATE_POOL_LABEL: pool_id},
        )


def _pointer(parts: Sequence[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def parse_substrate(stored: Mapping[str, Any], *, at: str = "/policy/substrate") -> Substrate:
    """A stored `policy.substrate` as its model: the substrate's one parse. A document that
    FleetConfig accepted always parses; anything else is INVALID_INPUT naming each field."""
    try:
        return Substrate.model_validate(stored)
    except ValidationError as exc:
        problems = [
            Problem(at + _pointer([p for p in error["loc"] if p != "[key]"]), str(error["msg"]))
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise ComputeError.invalid(problems) from exc
