"""Where a CLI command gets its Compute and its tenant.

`--app module:attr` (or BC_APP) names your own Compute, as `examples/compute.py`
builds it with its modules; the attribute may also be a function that returns one.
Without it, the standard control plane is built from the environment: BC_DATABASE_URL,
BC_SECRET (BC_PREVIOUS_SECRETS while rotating it) and BC_BASE_URL, with the vps and kubernetes modules (every provider whose
SDK extra is installed; the substrate agent from BC_BCD_IMAGE, BC_GATEWAY_URL,
BC_GATEWAY_PINS and BC_CONTROL_PLANE_URL) and FleetConfig, so that
`better-compute fleet plan fleet.json` works as the spec shows it. The tenant comes
from `--tenant` or BC_TENANT, by id or by name.

Without BC_DATABASE_URL the database is an embedded SQLite file in the per-user data
directory (`better-compute doctor` shows where; BC_DATA_DIR moves it), upgraded by
any command that opens it, and without BC_SECRET its server secret is a random one
kept beside it (mode 0600). A database named by BC_DATABASE_URL is never upgraded
behind the operator's back: a command finds it behind and says to run `db upgrade`.
"""

from __future__ import annotations

import importlib
import os
import secrets as _random
import sys
from datetime import timedelta
from pathlib import Path

import platformdirs
from sqlalchemy.engine import make_url

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.module import Module
from better_compute.decisions import DEFAULT_RETENTION
from better_compute.fleet import fleet_module
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.agent import substrate_agent_from_env
from better_compute.ops.tenants import tenant_id_of
from better_compute.server import Compute, better_compute, pending_migrations
from better_compute.store.db import normalize_url
from better_compute.vps import vps
from better_compute.vps.provider import ProviderImpl

__all__ = [
    "ENVIRONMENT",
    "data_dir",
    "database_url",
    "event_retention",
    "installed_providers",
    "load_compute",
    "open_compute",
    "previous_secrets",
    "resolve_tenant",
    "standard_modules",
    "tenant_id",
    "uses_embedded_database",
]


ENVIRONMENT = (
    ("BC_DATABASE_URL", "sqlite:///PATH or postgresql://...; default: the embedded SQLite file in the data directory"),
    (
        "BC_SECRET",
        "the server secret, 32+ characters; default: one kept in the data directory (embedded database only)",
    ),
    (
        "BC_PREVIOUS_SECRETS",
        "older server secrets, comma-separated, while rotating: they open what they sealed; default: none",
    ),
    ("BC_DATA_DIR", "the per-user data directory; default: the platform's (~/.local/share/better-compute)"),
    ("BC_BASE_URL", "the control plane's public URL; default: http://127.0.0.1:8080"),
    ("BC_TENANT", "the tenant (id or name) for --tenant"),
    ("BC_API_KEY", "an API key: `doctor` asks the server at BC_BASE_URL for its findings; default: none"),
    ("BC_APP", "your own Compute as module:attr, for --app"),
    ("BC_GKE_ENDPOINT, BC_EKS_ENDPOINT, BC_DOKS_ENDPOINT", "point a provider at an emulator"),
    ("BC_BCD_IMAGE", "bcd's image for the substrate agent; unset: no agent (self-check says so)"),
    ("BC_GATEWAY_URL, BC_GATEWAY_PINS", "the node gateway's wss:// URL and its SPKI pins (comma-separated)"),
    (
        "BC_CONTROL_PLANE_URL, BC_CONTROL_PLANE_CA_FILE",
        "where bcd joins (default BC_BASE_URL), and a private CA (bcd and doctor trust it)",
    ),
    ("BC_DEBUG", "1: print the traceback of an internal error"),
    ("BC_SQLITE_SHARED", "1: open a SQLite file another process has open (refused otherwise; docs/operations.md)"),
    ("BC_EVENT_RETENTION_DAYS", "how many days the decision log keeps an event before compacting it; default: 30"),
)
"""What the CLI reads from the environment, and the defaults (its --help and docs/cli.md show them)."""


def data_dir() -> Path:
    """The per-user data directory (BC_DATA_DIR, else the platform's, e.g. ~/.local/share/better-compute)."""
    return Path(os.environ.get("BC_DATA_DIR") or platformdirs.user_data_dir("better-compute", appauthor=False))


def uses_embedded_database(app_ref: str | None = None) -> bool:
    """Whether the command runs on the embedded SQLite default (no --app/BC_APP, no BC_DATABASE_URL)."""
    return not (app_ref or os.environ.get("BC_APP") or os.environ.get("BC_DATABASE_URL"))


def database_url() -> str:
    """BC_DATABASE_URL, or the embedded SQLite file in the data directory."""
    return os.environ.get("BC_DATABASE_URL") or f"sqlite:///{data_dir() / 'better-compute.db'}"


def _embedded_secret() -> str:
    """The server secret kept beside the embedded database, made on first use (readable by the user only)."""
    path = data_dir() / "secret"
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(_random.token_urlsafe(48))
        return path.read_text().strip()
    except OSError as exc:
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"cannot keep the server secret in {path}: {exc.strerror}; set BC_SECRET or BC_DATA_DIR",
            "/BC_SECRET",
        ) from exc


def load_compute(app_ref: str | None) -> Compute:
    """The Compute named by `app_ref` / BC_APP, or one built from BC_DATABASE_URL and BC_SECRET."""
    ref = app_ref or os.environ.get("BC_APP")
    if ref:
        return _import_compute(ref)
    secret = os.environ.get("BC_SECRET")
    if not secret and uses_embedded_database():
        secret = _embedded_secret()
    if not secret:
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            "set BC_SECRET (at least 32 characters) or name your Compute with --app module:attr",
            "/BC_SECRET",
        )
    if uses_embedded_database():
        data_dir().mkdir(parents=True, exist_ok=True)
    url = database_url()
    try:
        normalize_url(url)
    except ComputeError as exc:
        raise ComputeError(exc.code, f"BC_DATABASE_URL: {exc.message}", "/BC_DATABASE_URL") from None
    return better_compute(
        database=url,
        secret=secret,
        previous_secrets=previous_secrets(),
        base_url=os.environ.get("BC_BASE_URL", "http://127.0.0.1:8080"),
        modules=standard_modules(installed_providers()),
        event_retention=event_retention(),
    )


def event_retention() -> timedelta:
    """BC_EVENT_RETENTION_DAYS (a positive number of days), else the decision log's default (30 days)."""
    raw = os.environ.get("BC_EVENT_RETENTION_DAYS", "").strip()
    if not raw:
        return DEFAULT_RETENTION
    try:
        days = float(raw)
    except ValueError:
        days = 0.0
    if not 0 < days < 100_000:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, "BC_EVENT_RETENTION_DAYS is a positive number of days", "/BC_EVENT_RETENTION_DAYS"
        )
    return timedelta(days=days)


def previous_secrets() -> list[str]:
    """BC_PREVIOUS_SECRETS: the older server secrets, comma-separated (a server secret holds no comma)."""
    return [s.strip() for s in os.environ.get("BC_PREVIOUS_SECRETS", "").split(",") if s.strip()]


def standard_modules(providers: list[ProviderImpl]) -> list[Module]:
    """vps and kubernetes with the same providers (the agent from the environment), then FleetConfig."""
    agent = substrate_agent_from_env(os.environ)
    return [
        vps(providers=providers),
        kubernetes(providers=providers, substrate=SubstrateConfig(agent=agent)),
        fleet_module(),
    ]


def installed_providers() -> list[ProviderImpl]:
    """GKE, EKS and DOKS, each whose SDK extra is installed, reading its credentials the usual
    way; BC_GKE_ENDPOINT, BC_EKS_ENDPOINT and BC_DOKS_ENDPOINT point one at an emulator."""
    providers: list[ProviderImpl] = []
    for module_name, factory, variable in (
        ("better_compute.providers.gcp", "gcp_provider", "BC_GKE_ENDPOINT"),
        ("better_compute.providers.aws", "aws_provider", "BC_EKS_ENDPOINT"),
        ("better_compute.providers.digitalocean", "digitalocean_provider", "BC_DOKS_ENDPOINT"),
    ):
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # that provider's extra is not installed
            continue
        providers.append(getattr(module, factory)(endpoint=os.environ.get(variable)))
    return providers


async def open_compute(app_ref: str | None, *, upgrade: bool = True) -> Compute:
    """The Compute with a current schema: the embedded default is upgraded, any other database that is
    behind is INVALID_STATE saying to run `better-compute db upgrade`."""
    compute = load_compute(app_ref)
    _check_sqlite_directory(compute.db.url)
    if not upgrade:
        return compute
    try:
        pending = await pending_migrations(compute.db)
        if pending and uses_embedded_database(app_ref):
            await compute.migrate()
        elif pending:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                "the database schema is not current (migrations not applied: "
                f"{', '.join(pending)}): run `better-compute db upgrade` first",
            )
    except BaseException:
        await compute.close()
        raise
    return compute


def _check_sqlite_directory(url: str) -> None:
    """A SQLite file whose directory is missing fails deep in the driver's thread; say so first."""
    parsed = make_url(url)
    name = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and name and name != ":memory:" and not Path(name).parent.is_dir():
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"the SQLite file's directory {Path(name).parent} does not exist: create it or fix BC_DATABASE_URL",
            "/BC_DATABASE_URL",
        )


async def tenant_id(compute: Compute, tenant: str | None) -> str:
    """The id of the tenant named (by id or name) with --tenant or BC_TENANT."""
    return await tenant_id_of(compute, resolve_tenant(tenant))


def resolve_tenant(tenant: str | None) -> str:
    """The tenant id from --tenant or BC_TENANT."""
    found = tenant or os.environ.get("BC_TENANT")
    if not found:
        raise ComputeError(ErrorCode.INVALID_INPUT, "name the tenant with --tenant or BC_TENANT", "/tenant")
    return found


def _import_compute(ref: str) -> Compute:
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"--app takes module:attribute, not {ref!r}", "/app")
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)  # `--app compute:compute` finds ./compute.py
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ComputeError(ErrorCode.NOT_FOUND, f"cannot import {module_name!r}: {exc}", "/app") from exc
    found = getattr(module, attribute, None)
    if callable(found) and not isinstance(found, Compute):
        found = found()
    if not isinstance(found, Compute):
        raise ComputeError(ErrorCode.INVALID_INPUT, f"{ref} is not a Compute (build it with better_compute())", "/app")
    return found
