"""No route of the API runs in FastAPI's thread pool: a plain `def` endpoint or dependency is run there, a
hop to a worker thread and back on every request (two a request for the operator routes' Compute and
tenant, before they were coroutines)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from better_compute.api import create_app
from better_compute.fleet import fleet_module
from better_compute.server import better_compute
from better_compute.vps import vps


def _api_routes(routes: Sequence[Any]) -> list[APIRoute]:
    """Every APIRoute, inside the included routers too (FastAPI keeps those as routers, not copies)."""
    found = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif (router := getattr(route, "original_router", None)) is not None:
            found += _api_routes(router.routes)
    return found


def _sync_calls(dependant: Dependant, route: str) -> list[str]:
    found = []
    for dependency in dependant.dependencies:
        call = dependency.call
        if call is not None and not (inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)):
            found.append(f"{route}: {getattr(call, '__qualname__', call)}")
        found += _sync_calls(dependency, route)
    return found


def test_every_endpoint_and_dependency_is_a_coroutine(tmp_path: object) -> None:
    compute = better_compute(
        database=f"sqlite:///{tmp_path}/api.db",
        secret="a-test-secret-of-at-least-32-characters",
        modules=[vps(), fleet_module()],
    )
    routes = _api_routes(create_app(compute).routes)
    assert {"/v1/pools", "/v1/nodes", "/v1/reservations", "/v1/fleet/apply"} <= {r.path for r in routes}
    sync = [f"{r.path}: {r.endpoint.__qualname__}" for r in routes if not inspect.iscoroutinefunction(r.endpoint)]
    for route in routes:
        sync += _sync_calls(route.dependant, route.path)
    assert sync == []
