"""The Module protocol: how vps, kubernetes, fleet and gateway plug into a Compute.

`better_compute(modules=[...])` calls `bind(compute)` on each module in order; the
module keeps the Compute and attaches its services with `compute.attach("fleet",
service)`, after which `compute.fleet` (typed, for the services of this package's modules)
and `compute.service("fleet")` are that service. The Compute then registers
the module's reconcilers with its engine and mounts its routers in the HTTP API.
Tables and migrations are not configured here: every module's Alembic branch lives in
`store/migrations` and `better-compute db upgrade` runs them all.

A module that holds resources of its own (a background task, a LISTEN connection)
may define `async def start()` and `async def close()`: `Compute.start()` starts the
modules in order before the engine workers, and `Compute.close()` closes them in
reverse order after the workers stop.

A module whose routers authenticate callers their own way (the node gateway) lists
their path prefixes in an optional `public_prefixes: tuple[str, ...]` attribute; the
API-key middleware leaves those paths alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from fastapi import APIRouter

    from better_compute.compute import ChangeFeed, Nodes, Pools, Quotas, Reservations, Sites
    from better_compute.core.clock import Clock
    from better_compute.core.findings import Finding
    from better_compute.engine import Engine, Reconciler
    from better_compute.fleet.service import Fleet
    from better_compute.gateway.service import Gateway
    from better_compute.gateway.tokens import JoinTokens
    from better_compute.iam import Iam
    from better_compute.kubernetes.clusters.service import KubernetesClusters
    from better_compute.kubernetes.substrates.service import KubernetesSubstrates
    from better_compute.kubernetes.sweep.service import KubernetesSweep
    from better_compute.secrets import Secrets
    from better_compute.store import Database
    from better_compute.vps.module import ProviderAccounts

__all__ = ["ComputeLike", "Module"]


class ComputeLike(Protocol):
    """What a module may use of the Compute it is bound to."""

    db: Database
    clock: Clock
    engine: Engine
    secret: str
    base_url: str
    iam: Iam
    secrets: Secrets
    sites: Sites
    pools: Pools
    nodes: Nodes
    reservations: Reservations
    quotas: Quotas
    feed: ChangeFeed
    modules: dict[str, Module]

    def module(self, name: str) -> Module: ...

    def attach(self, name: str, service: object) -> None: ...

    def service(self, name: str) -> object: ...

    def wake(self) -> None: ...

    # The services of this package's modules (server.Compute: AttributeError until attached).
    @property
    def gateway(self) -> Gateway: ...
    @property
    def join_tokens(self) -> JoinTokens: ...
    @property
    def provider_accounts(self) -> ProviderAccounts: ...
    @property
    def kubernetes_clusters(self) -> KubernetesClusters: ...
    @property
    def kubernetes_substrates(self) -> KubernetesSubstrates: ...
    @property
    def kubernetes_sweep(self) -> KubernetesSweep: ...
    @property
    def fleet(self) -> Fleet: ...


class Module(Protocol):
    name: str

    def bind(self, compute: ComputeLike) -> None:
        """Receive the Compute; attach this module's services to it."""
        ...

    def reconcilers(self) -> list[Reconciler]: ...

    def routers(self) -> list[APIRouter]: ...

    def self_check(self) -> list[Finding]:
        """Configuration problems found without I/O."""
        ...

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        """Problems found by looking at the world: the database, providers, clusters (only
        `tenant_id`'s objects when given: an API key's view)."""
        ...
