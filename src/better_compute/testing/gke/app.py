"""The HTTP face of the GKE emulator: container v1 REST paths, the google.rpc.Status envelope, Compute Engine's
regions (`/compute/v1/...`: get, with the quotas) and instance group managers (get, deleteInstances,
recreateInstances), and the OAuth token endpoint.

Paths are those google-cloud-container's REST transport sends
(`/v1/projects/{p}/locations/{l}/clusters/{c}/nodePools/{np}:setSize` and so on);
custom methods follow a colon, so one catch-all route matches them by pattern.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from better_compute.testing.gke.compute import GROUP_MANAGER, INSTANCES_ACTION, REGION, ComputeApiError
from better_compute.testing.gke.errors import GkeApiError
from better_compute.testing.gke.updates import update_cluster, update_node_pool

if TYPE_CHECKING:
    from better_compute.testing.gke.emulator import GkeEmulator

_LOC = r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
_CLUSTER = _LOC + r"/clusters/(?P<cluster>[^/:]+)"
_POOL = _CLUSTER + r"/nodePools/(?P<pool>[^/:]+)"

Handler = Callable[["GkeEmulator", dict[str, str], dict[str, Any]], Any]

_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("GET", re.compile(_LOC + r"/serverConfig"), lambda e, m, b: e.server_config()),
    ("GET", re.compile(_LOC + r"/clusters"), lambda e, m, b: _list_clusters(e, m)),
    ("POST", re.compile(_LOC + r"/clusters"), lambda e, m, b: e.create_cluster(m["project"], m["location"], b)),
    ("GET", re.compile(_CLUSTER), lambda e, m, b: e.cluster(m["project"], m["location"], m["cluster"])),
    ("DELETE", re.compile(_CLUSTER), lambda e, m, b: e.delete_cluster(m["project"], m["location"], m["cluster"])),
    ("PUT", re.compile(_CLUSTER), lambda e, m, b: update_cluster(e, m["project"], m["location"], m["cluster"], b)),
    (
        "POST",
        re.compile(_CLUSTER + r":updateMaster"),
        lambda e, m, b: e.update_master(m["project"], m["location"], m["cluster"], b),
    ),
    (
        "GET",
        re.compile(_CLUSTER + r"/nodePools"),
        lambda e, m, b: {
            "nodePools": [p.to_json() for p in e.cluster(m["project"], m["location"], m["cluster"]).node_pools.values()]
        },
    ),
    (
        "POST",
        re.compile(_CLUSTER + r"/nodePools"),
        lambda e, m, b: e.create_node_pool(m["project"], m["location"], m["cluster"], b),
    ),
    (
        "GET",
        re.compile(_POOL),
        lambda e, m, b: e.node_pool(m["project"], m["location"], m["cluster"], m["pool"])[1],
    ),
    (
        "PUT",
        re.compile(_POOL),
        lambda e, m, b: update_node_pool(e, m["project"], m["location"], m["cluster"], m["pool"], b),
    ),
    (
        "DELETE",
        re.compile(_POOL),
        lambda e, m, b: e.delete_node_pool(m["project"], m["location"], m["cluster"], m["pool"]),
    ),
    (
        "POST",
        re.compile(_POOL + r":setSize"),
        lambda e, m, b: e.set_size(m["project"], m["location"], m["cluster"], m["pool"], b),
    ),
    (
        "POST",
        re.compile(_POOL + r":setAutoscaling"),
        lambda e, m, b: e.set_autoscaling(m["project"], m["location"], m["cluster"], m["pool"], b),
    ),
    (
        "GET",
        re.compile(_LOC + r"/operations/(?P<operation>[^/:]+)"),
        lambda e, m, b: e.operation(m["project"], m["location"], m["operation"]),
    ),
    ("GET", re.compile(_LOC + r"/operations"), lambda e, m, b: _list_operations(e, m)),
]


def _list_clusters(emulator: GkeEmulator, match: dict[str, str]) -> dict[str, Any]:
    return {
        "clusters": [
            c.to_json()
            for c in emulator.clusters.values()
            if c.project == match["project"] and match["location"] in ("-", c.location)
        ]
    }


def _list_operations(emulator: GkeEmulator, match: dict[str, str]) -> dict[str, Any]:
    return {
        "operations": [
            op.to_json()
            for op in emulator.operations.values()
            if op.project == match["project"] and match["location"] in ("-", op.location)
        ]
    }


def _error(exc: GkeApiError) -> JSONResponse:
    return JSONResponse(exc.envelope(), status_code=exc.http_status, headers=exc.headers)


def build_app(emulator: GkeEmulator) -> Starlette:
    async def api(request: Request) -> Response:
        path = request.path_params["path"]
        emulator.requests.append((request.method, path))
        try:
            throttled = emulator.throttled()
            if throttled is not None:
                raise throttled
            emulator.authenticate(request.headers.get("authorization"))
            raw = await request.body()
            body = json.loads(raw) if raw else {}
            for method, pattern, handler in _ROUTES:
                match = pattern.fullmatch(path)
                if match and method == request.method:
                    result = handler(emulator, match.groupdict(), body)
                    return JSONResponse(result if isinstance(result, dict) else result.to_json())
            raise GkeApiError("NOT_FOUND", f"The requested URL /v1/{path} was not found on this server.")
        except GkeApiError as exc:
            return _error(exc)
        except (ValueError, json.JSONDecodeError) as exc:
            return _error(GkeApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {exc}"))

    async def compute(request: Request) -> Response:
        """compute.googleapis.com v1: a region's quotas, and the node pools' managed instance groups (read, and
        named VMs removed)."""
        path = request.path_params["path"]
        emulator.requests.append((request.method, f"compute/v1/{path}"))
        try:
            try:
                emulator.authenticate(request.headers.get("authorization"))
            except GkeApiError as exc:
                raise ComputeApiError(401, "authError", exc.message) from exc
            region = REGION.fullmatch(path)
            if region is not None and request.method == "GET":
                return JSONResponse(emulator.region(region["project"], region["region"]))
            match = GROUP_MANAGER.fullmatch(path)
            if match is not None and request.method == "GET":
                return JSONResponse(emulator.instance_group_manager(match["project"], match["zone"], match["name"]))
            action = INSTANCES_ACTION.fullmatch(path)
            if action is None or request.method != "POST":
                raise ComputeApiError(404, "notFound", f"The requested URL /compute/v1/{path} was not found.")
            try:
                raw = await request.body()
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError as exc:
                raise ComputeApiError(
                    400, "parseError", "This API does not support parsing form-encoded input."
                ) from exc
            if not isinstance(body, dict):
                raise ComputeApiError(400, "parseError", "Invalid JSON payload received.")
            return JSONResponse(
                emulator.remove_instances(
                    action["project"],
                    action["zone"],
                    action["name"],
                    body,
                    recreate=action["action"] == "recreateInstances",
                )
            )
        except ComputeApiError as exc:
            return JSONResponse(exc.envelope(), status_code=exc.http_status)

    async def token(request: Request) -> Response:
        form = parse_qs((await request.body()).decode())
        if form.get("grant_type") != ["refresh_token"]:
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        try:
            return JSONResponse(emulator.mint_token(form.get("refresh_token", [""])[0]))
        except GkeApiError:
            return JSONResponse({"error": "invalid_grant", "error_description": "Bad Request"}, status_code=400)

    async def generate_access_token(request: Request) -> Response:
        """iamcredentials.googleapis.com v1 generateAccessToken (the driver's override points here)."""
        account = request.path_params["account"]
        emulator.requests.append(("POST", f"iamcredentials/{account}:generateAccessToken"))
        try:
            body = json.loads(await request.body() or b"{}")
            return JSONResponse(emulator.generate_access_token(request.headers.get("authorization"), account, body))
        except json.JSONDecodeError:
            return _error(GkeApiError("INVALID_ARGUMENT", "Invalid JSON payload received."))
        except GkeApiError as exc:
            return _error(exc)

    return Starlette(
        routes=[
            Route(
                "/v1/projects/-/serviceAccounts/{account}:generateAccessToken",
                generate_access_token,
                methods=["POST"],
            ),
            Route("/v1/{path:path}", api, methods=["GET", "POST", "PUT", "DELETE"]),
            Route("/compute/v1/{path:path}", compute, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
            Route("/token", token, methods=["POST"]),
        ]
    )
