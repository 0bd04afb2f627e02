"""Where a CLI command gets its Compute and its tenant.

`--app module:attr` (or BC_APP) names your own Compute, as `examples/compute.py`
builds it with its modules; the attribute may also be a function that returns one.
Without it, the standard control plane is built from the environment: BC_DATABASE_URL
(default `sqlite:///better-compute.db`), BC_SECRET and BC_BASE_URL, with the vps and
kubernetes modules (every provider whose SDK extra is installed; the substrate agent from
BC_BCD_IMAGE, BC_GATEWAY_URL, BC_GATEWAY_PINS and BC_CONTROL_PLANE_URL) and FleetConfig,
so that `better-compute fleet plan fleet.json` works as the spec shows it. The tenant comes
from `--tenant` or BC_TENANT.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.module import Module
from better_compute.fleet import fleet_module
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.agent import substrate_agent_from_env
from better_compute.server import DEFAULT_DATABASE, Compute, better_compute
from better_compute.vps import vps
from better_compute.vps.provider import ProviderImpl

__all__ = ["installed_providers", "load_compute", "resolve_tenant", "standard_modules"]


def load_compute(app_ref: str | None) -> Compute:
    """The Compute named by `app_ref` / BC_APP, or one built from BC_DATABASE_URL and BC_SECRET."""
    ref = app_ref or os.environ.get("BC_APP")
    if ref:
        return _import_compute(ref)
    secret = os.environ.get("BC_SECRET")
    if not secret:
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            "set BC_SECRET (at least 32 characters) or name your Compute with --app module:attr",
            "/BC_SECRET",
        )
    return better_compute(
        database=os.environ.get("BC_DATABASE_URL", DEFAULT_DATABASE),
        secret=secret,
        base_url=os.environ.get("BC_BASE_URL", "http://127.0.0.1:8080"),
        modules=standard_modules(installed_providers()),
    )


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
