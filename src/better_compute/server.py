"""better_compute(): options and modules in, a Compute out.

    compute = better_compute(database="sqlite:///better-compute.db", secret="...32+ chars...",
                             base_url="http://127.0.0.1:8080", modules=[vps(...), kubernetes(...), fleet_module()])
    await compute.migrate()          # or `better-compute db upgrade`
    await compute.start()            # engine workers (what `better-compute serve` does)
    ...
    await compute.close()

The Compute holds the store, the clock, the engine and the core services (iam,
secrets, sites, pools, nodes, reservations, quotas). Each module is bound to it in
order, attaches its own services, and hands its reconcilers to the engine and its routers
to the HTTP API. The services of the modules this package ships have typed accessors
(`compute.fleet`, `compute.gateway`, ...), so mypy checks their callers; another module's
service is `compute.service(name)`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast
from urllib.parse import urlparse

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi import APIRouter
from sqlalchemy import text

from better_compute.compute import ChangeFeed, Nodes, Pools, Quotas, Reservations, Sites, compute_services
from better_compute.compute.health import quarantine_findings
from better_compute.core.clock import Clock, SystemClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.findings import Finding
from better_compute.core.module import Module
from better_compute.core.redaction import redact_value
from better_compute.decisions import DEFAULT_RETENTION, check_retention
from better_compute.decisions import compact as compact_decisions
from better_compute.engine import Engine, queue
from better_compute.gateway.module import gateway
from better_compute.iam import Iam
from better_compute.secrets import Secrets
from better_compute.store import Database
from better_compute.store.migrate import alembic_config

if TYPE_CHECKING:
    from better_compute.fleet.service import Fleet
    from better_compute.gateway.service import Gateway
    from better_compute.gateway.tokens import JoinTokens
    from better_compute.kubernetes.clusters.service import KubernetesClusters
    from better_compute.kubernetes.substrates.service import KubernetesSubstrates
    from better_compute.kubernetes.sweep.service import KubernetesSweep
    from better_compute.vps.module import ProviderAccounts

__all__ = ["DEFAULT_DATABASE", "MIN_SECRET_LENGTH", "Compute", "better_compute"]

log = logging.getLogger("better_compute.server")

SERVICES = frozenset(
    {
        "gateway",
        "join_tokens",
        "provider_accounts",
        "kubernetes_clusters",
        "kubernetes_substrates",
        "kubernetes_sweep",
        "fleet",
    }
)
"""The services with a typed accessor on Compute: the module that provides one attaches it by this name."""

DEFAULT_DATABASE = "sqlite:///better-compute.db"
MIN_SECRET_LENGTH = 32


def better_compute(
    *,
    database: str = DEFAULT_DATABASE,
    secret: str,
    base_url: str = "http://127.0.0.1:8080",
    modules: Sequence[Module] = (),
    clock: Clock | None = None,
    lease_seconds: float = 60.0,
    previous_secrets: Sequence[str] = (),
    event_retention: timedelta = DEFAULT_RETENTION,
) -> Compute:
    """Build a Compute: a SQLite file by default, PostgreSQL for a `postgresql://` URL.

    `secret` seals; `previous_secrets` (older server secrets, while rotating) only open what
    they sealed, until `better-compute secrets reseal` has moved it to `secret`. The decision
    log keeps each event for `event_retention` (30 days by default), then compacts it."""
    if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"the server secret needs at least {MIN_SECRET_LENGTH} characters", "/secret"
        )
    if isinstance(previous_secrets, str):
        raise ComputeError(ErrorCode.INVALID_INPUT, "previous_secrets is a list of secrets", "/previousSecrets")
    for index, previous in enumerate(previous_secrets):
        if not isinstance(previous, str) or len(previous) < MIN_SECRET_LENGTH:
            raise ComputeError(
                ErrorCode.INVALID_INPUT,
                f"a previous server secret needs at least {MIN_SECRET_LENGTH} characters",
                f"/previousSecrets/{index}",
            )
        redact_value(previous, pinned=True)
    check_retention(event_retention)
    redact_value(secret, pinned=True)
    if not any(module.name == "gateway" for module in modules):
        # bcd's join and session endpoints are part of every control plane (`better-compute serve`);
        # bound first, since the modules that manage machines (kubernetes) hook into it.
        modules = [gateway(), *modules]
    db = Database(database)
    return Compute(
        db=db,
        clock=clock or SystemClock(),
        secret=secret,
        base_url=base_url,
        modules=modules,
        lease_seconds=lease_seconds,
        previous_secrets=tuple(previous_secrets),
        event_retention=event_retention,
    )


class Compute:
    """The control plane in one object; see the module docstring."""

    sites: Sites
    pools: Pools
    nodes: Nodes
    reservations: Reservations
    quotas: Quotas
    feed: ChangeFeed

    def __init__(
        self,
        *,
        db: Database,
        clock: Clock,
        secret: str,
        base_url: str,
        modules: Sequence[Module],
        lease_seconds: float = 60.0,
        previous_secrets: Sequence[str] = (),
        event_retention: timedelta = DEFAULT_RETENTION,
    ) -> None:
        self.db = db
        self.clock = clock
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.engine = Engine(db, clock, [], lease_seconds=lease_seconds)
        self.event_retention = check_retention(event_retention)
        self.engine.compact_also("decision log events", self.compact_events)
        self.iam = Iam(db, clock)
        self.secrets = Secrets(db, clock, secret, previous_secrets)
        core = compute_services(db, clock)
        self.sites, self.pools, self.nodes = core.sites, core.pools, core.nodes
        self.reservations, self.quotas, self.feed = core.reservations, core.quotas, core.feed
        self.modules: dict[str, Module] = {}
        self._services: dict[str, object] = {}
        self._stack: AsyncExitStack | None = None
        for module in modules:
            if module.name in self.modules:
                raise ComputeError(ErrorCode.INVALID_INPUT, f"module {module.name!r} is given twice", "/modules")
            self.modules[module.name] = module
            module.bind(self)
            for reconciler in module.reconcilers():
                self.engine.register(reconciler)

    def attach(self, name: str, service: object) -> None:
        """Make `service` available as `compute.service(name)` (and its typed accessor below, for the
        services of this package's modules); a name is attached once."""
        taken = name in self.__dict__ or hasattr(type(self), name)
        if name in self._services or (taken and name not in SERVICES):
            raise ValueError(f"Compute already has {name!r}")
        self._services[name] = service

    def service(self, name: str) -> object:
        """A module's service attached with `attach`."""
        try:
            return self._services[name]
        except KeyError:
            raise AttributeError(f"Compute has no {name!r}: is the module that provides it in `modules`?") from None

    @property
    def gateway(self) -> Gateway:
        """The node gateway (gateway())."""
        return cast("Gateway", self.service("gateway"))

    @property
    def join_tokens(self) -> JoinTokens:
        """The gateway's join tokens (gateway())."""
        return cast("JoinTokens", self.service("join_tokens"))

    @property
    def provider_accounts(self) -> ProviderAccounts:
        """Provider accounts (vps())."""
        return cast("ProviderAccounts", self.service("provider_accounts"))

    @property
    def kubernetes_clusters(self) -> KubernetesClusters:
        """Managed clusters (kubernetes())."""
        return cast("KubernetesClusters", self.service("kubernetes_clusters"))

    @property
    def kubernetes_substrates(self) -> KubernetesSubstrates:
        """Pool substrates' state (kubernetes())."""
        return cast("KubernetesSubstrates", self.service("kubernetes_substrates"))

    @property
    def kubernetes_sweep(self) -> KubernetesSweep:
        """The orphan sweep of the tenant's provider accounts (kubernetes())."""
        return cast("KubernetesSweep", self.service("kubernetes_sweep"))

    @property
    def fleet(self) -> Fleet:
        """Fleet documents: plan and apply (fleet_module())."""
        return cast("Fleet", self.service("fleet"))

    def module(self, name: str) -> Module:
        try:
            return self.modules[name]
        except KeyError:
            raise ComputeError(ErrorCode.NOT_FOUND, f"module {name!r} is not configured") from None

    def routers(self) -> list[APIRouter]:
        return [router for module in self.modules.values() for router in module.routers()]

    def public_prefixes(self) -> tuple[str, ...]:
        """Paths whose routers authenticate their own way (see core.module)."""
        found: list[str] = []
        for module in self.modules.values():
            found.extend(getattr(module, "public_prefixes", ()))
        return tuple(found)

    def wake(self) -> None:
        self.engine.wake()

    async def migrate(self) -> None:
        """Bring the schema to every module's newest migration."""
        await self.db.upgrade()

    async def compact_events(self, now: datetime) -> int:
        """Delete the decision log's events older than `event_retention` (the engine does it on its schedule)."""
        return await compact_decisions(self.db, now=now, retention=self.event_retention)

    async def run_until_idle(self, *, until: datetime | None = None, max_runs: int = 100_000) -> int:
        return await self.engine.run_until_idle(until=until, max_runs=max_runs)

    async def start(self) -> None:
        """Start each module that has a `start()`, in order, then the engine workers.

        The schema must be current (`better-compute db upgrade`). If a start fails,
        what was started already is closed again.
        """
        if self._stack is not None:
            raise ComputeError(ErrorCode.INVALID_STATE, "this Compute is started already")
        pending = await pending_migrations(self.db)
        if pending:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"the database schema is behind ({', '.join(pending)}): run `better-compute db upgrade`",
            )
        async with AsyncExitStack() as stack:
            await self.iam.start()
            stack.push_async_callback(self.iam.close)
            for module in self.modules.values():
                start = getattr(module, "start", None)
                if start is not None:
                    await start()
                close = getattr(module, "close", None)
                if close is not None:
                    stack.push_async_callback(close)
            workers = asyncio.create_task(self.engine.serve(), name=f"engine:{self.engine.owner}")
            stack.push_async_callback(_stop, workers)
            self._stack = stack.pop_all()

    async def close(self) -> None:
        """Stop what start() started in reverse order (engine first, then modules), then close the database."""
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            await self.db.dispose()

    def self_check(self) -> list[Finding]:
        """Configuration problems, found without I/O."""
        findings: list[Finding] = []
        parsed = urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            findings.append(
                Finding("server.base-url-invalid", "error", f"base_url {self.base_url!r} is not an http(s) URL")
            )
        if not self.db.is_postgres:
            findings.append(
                Finding(
                    "store.sqlite-single-process",
                    "info",
                    "SQLite serves one process; use a postgresql:// database to run several `serve` replicas",
                )
            )
        for module in self.modules.values():
            findings.extend(module.self_check())
        return findings

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        """self_check() plus what only I/O can tell: the database, the schema, each module's world.

        With `tenant_id` (the HTTP route, an API key's view) nothing of another tenant shows: the
        modules report only that tenant's objects, and failing work items are counted, not named.
        """
        findings = self.self_check()
        try:
            async with self.db.session() as session:
                await session.execute(text("SELECT 1"))
        except Exception as exc:
            findings.append(
                Finding("store.unreachable", "error", f"the database does not answer: {type(exc).__name__}")
            )
            return findings
        pending = await pending_migrations(self.db)
        if pending:
            findings.append(
                Finding(
                    "store.schema-outdated",
                    "error",
                    f"migrations not applied: {', '.join(pending)}; run `better-compute db upgrade`",
                )
            )
            return findings
        failing = await queue.failing(self.db)
        findings.extend(_engine_findings(failing) if tenant_id is None else _engine_counts(failing))
        findings.extend(quarantine_findings(await self.nodes.quarantined(tenant_id=tenant_id)))
        for module in self.modules.values():
            findings.extend(await module.doctor(tenant_id=tenant_id))
        return findings


def _engine_findings(failing: list[queue.Failing]) -> list[Finding]:
    """Work items whose last run failed: stopped ones are errors, retrying ones warnings."""
    findings: list[Finding] = []
    for item in failing:
        what = f"{item.kind}/{item.key} failed {item.attempts} time(s) in a row: {item.last_error}"
        if item.retrying:
            findings.append(Finding("engine.item-retrying", "warning", f"{what}; retrying with backoff"))
        else:
            findings.append(Finding("engine.item-stopped", "error", f"{what}; stopped until its object changes"))
    return findings


def _engine_counts(failing: list[queue.Failing]) -> list[Finding]:
    """The same findings for one tenant's view: how many items, never whose or why."""
    retrying = sum(item.retrying for item in failing)
    stopped = len(failing) - retrying
    unnamed = "the server's own `better-compute doctor` names them"
    findings: list[Finding] = []
    if retrying:
        findings.append(
            Finding("engine.item-retrying", "warning", f"{retrying} work item(s) failing, retrying; {unnamed}")
        )
    if stopped:
        findings.append(Finding("engine.item-stopped", "error", f"{stopped} work item(s) stopped; {unnamed}"))
    return findings


async def pending_migrations(db: Database) -> list[str]:
    """The migration heads the database has not reached yet (empty when current)."""
    script = ScriptDirectory.from_config(alembic_config(db.url))
    heads = set(script.get_heads())
    async with db.engine.connect() as connection:
        current = await connection.run_sync(lambda sync: set(MigrationContext.configure(sync).get_current_heads()))
    return sorted(heads - current)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
