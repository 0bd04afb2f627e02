"""How many Nodes each flavor really gets at its provider, beside the document's `nodes`.

A flavor's `nodes` counts per zone of its node pool on GKE (the flavor's `zones`, else the
cluster's node zones: the account's `zones`, else three for a regional cluster) and per
Availability Zone of the account's subnets on EKS; on DOKS it is the total. The plan shows
the product (`nodes: 2 per zone x 3 zones = 6`), so the bill is never a surprise. The
provider's driver knows its own rule (`ProviderKubernetes.zone_count`); nothing here is
specific to one provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.fleet.schema import FleetDocument
from better_compute.vps.provider import ProviderAccount, ProviderImpl

__all__ = ["FlavorNodes", "flavor_nodes"]


@dataclass(frozen=True)
class FlavorNodes:
    """One flavor's `nodes` and what it comes to; `zones` is None where `nodes` is the total."""

    pool: str
    flavor: str
    provider: str
    nodes: int
    zones: int | None

    @property
    def total(self) -> int:
        return self.nodes * (self.zones or 1)

    def text(self) -> str:
        if self.zones is None:
            return f"nodes: {self.nodes} in total"
        zones = "zone" if self.zones == 1 else "zones"
        return f"nodes: {self.nodes} per zone x {self.zones} {zones} = {self.total}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "flavor": self.flavor,
            "provider": self.provider,
            "nodes": self.nodes,
            "perZone": self.zones is not None,
            "zones": self.zones,
            "total": self.total,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FlavorNodes:
        zones = data.get("zones")
        return cls(
            pool=str(data["pool"]),
            flavor=str(data["flavor"]),
            provider=str(data["provider"]),
            nodes=int(data["nodes"]),
            zones=int(zones) if zones is not None else None,
        )


def flavor_nodes(
    document: FleetDocument, *, tenant_id: str, providers: Mapping[str, ProviderImpl]
) -> tuple[FlavorNodes, ...]:
    """Every flavor of every substrate in the document, in document order (validated: each names an
    account of a provider with Kubernetes)."""
    accounts = {a.name: a for a in document.provider_accounts}
    sizes: list[FlavorNodes] = []
    for pool in document.pools:
        substrate = pool.policy.substrate
        spec = accounts.get(substrate.account) if substrate is not None else None
        impl = providers.get(spec.provider) if spec is not None else None
        if substrate is None or spec is None or impl is None or impl.kubernetes is None:
            continue
        kube = impl.kubernetes
        account = ProviderAccount(name=spec.name, provider=spec.provider, tenant_id=tenant_id, config=spec.config)
        for flavor in substrate.flavors:
            zones = kube.zone_count(account, tuple(flavor.zones or ())) if kube.vocabulary.nodes_per_zone else None
            sizes.append(FlavorNodes(pool.name, flavor.name, spec.provider, flavor.nodes, zones))
    return tuple(sizes)
