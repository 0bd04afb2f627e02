"""`fleet_module()`: FleetConfig documents as a module of a Compute.

    compute = better_compute(..., modules=[vps(providers=providers), kubernetes(...), fleet_module()])
    plan = await compute.fleet.plan(document, tenant_id=tenant.id)
    await compute.fleet.apply(document, tenant_id=tenant.id, prune=True)

It validates provider vocabulary with the definitions given to `vps(...)`, so vps
must be listed before it. It adds `POST /v1/fleet/plan` and `POST /v1/fleet/apply`;
the substrate work it queues is run by the kubernetes module's reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from better_compute.core.findings import Finding
from better_compute.fleet.router import router
from better_compute.fleet.service import Fleet
from better_compute.vps.module import VpsModule
from better_compute.vps.provider import ProviderImpl

if TYPE_CHECKING:
    from fastapi import APIRouter

    from better_compute.core.module import ComputeLike
    from better_compute.engine import Reconciler

__all__ = ["FleetModule", "fleet_module"]


class FleetModule:
    name = "fleet"

    def __init__(self) -> None:
        self.providers: Mapping[str, ProviderImpl] = {}
        self._vps_missing = False

    def bind(self, compute: ComputeLike) -> None:
        vps = compute.modules.get("vps")
        if isinstance(vps, VpsModule):
            self.providers = vps.providers
        else:
            self._vps_missing = True
        secrets = compute.secrets

        async def resolve(reference: str, tenant_id: str) -> str:
            return await secrets.resolve(reference, tenant_id=tenant_id)

        compute.attach(
            "fleet",
            Fleet(
                compute.db,
                compute.clock,
                providers=self.providers,
                wake=compute.wake,
                transaction=compute.feed.transaction,
                resolve_secret=resolve,
            ),
        )

    def reconcilers(self) -> list[Reconciler]:
        return []

    def routers(self) -> list[APIRouter]:
        return [router]

    def self_check(self) -> list[Finding]:
        if self._vps_missing:
            return [
                Finding(
                    "fleet.vps-missing",
                    "error",
                    "fleet_module() needs vps(providers=[...]) listed before it: without provider definitions "
                    "every provider account is refused",
                )
            ]
        return []

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        return []


def fleet_module() -> FleetModule:
    """The fleet module: `compute.fleet` and the /v1/fleet routes."""
    return FleetModule()
