"""The ASGI app: DigitalOcean's paths, Bearer authentication, rate limits and error envelope.

Every answer carries `ratelimit-limit`, `ratelimit-remaining`, `ratelimit-reset` and
`x-request-id`; errors are `{id, message, request_id}`; a 429 also carries `retry-after`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from better_compute.testing.doks import account
from better_compute.testing.doks import operations as ops

if TYPE_CHECKING:
    from better_compute.testing.doks.emulator import DoksEmulator

__all__ = ["build_app"]

ANONYMOUS = "anonymous"
Handler = Callable[["DoksEmulator", str, Request], Awaitable[ops.Result]]


def _json(status: int, body: dict[str, Any] | str | None, headers: dict[str, str]) -> Response:
    if body is None:
        return Response(status_code=status, headers=headers)
    if isinstance(body, str):
        return Response(body, status_code=status, headers=headers, media_type="application/yaml")
    return Response(json.dumps(body), status_code=status, headers=headers, media_type="application/json")


def _error(status: int, error_id: str, message: str, request_id: str, headers: dict[str, str]) -> Response:
    return _json(status, {"id": error_id, "message": message, "request_id": request_id}, headers)


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ops.ApiError(400, "bad_request", "the request body is not valid JSON") from exc


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ops.ApiError(400, "bad_request", f"{name} must be an integer") from exc


def build_app(emu: DoksEmulator) -> Starlette:
    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            request_id = str(uuid.uuid4())
            auth = request.headers.get("authorization", "")
            token = auth[7:] if auth.lower().startswith("bearer ") else ""
            team = emu.team_of(token)
            refuse = emu.faults.throttled_requests > 0
            if refuse:
                emu.faults.throttled_requests -= 1
            # unauthenticated requests share one bucket, as DigitalOcean limits them by client
            verdict = emu.limiter.check(token if team else ANONYMOUS, emu.clock.now(), force_refuse=refuse)
            headers = {"x-request-id": request_id, **verdict.headers}
            if not verdict.allowed:
                return _error(429, "too_many_requests", "API Rate limit exceeded.", request_id, headers)
            if team is None:
                return _error(401, "Unauthorized", "Unable to authenticate you", request_id, headers)
            emu.requests.append((request.method, request.url.path))
            await emu.settle()
            try:
                status, body = await handler(emu, team, request)
            except ops.ApiError as exc:
                return _error(exc.status, exc.error_id, exc.message, request_id, headers)
            return _json(status, body, headers)

        return serve

    def p(request: Request, name: str) -> str:
        return str(request.path_params[name])

    async def clusters_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.list_clusters(e, t, max(1, _int_param(r, "page", 1)), max(1, _int_param(r, "per_page", 20)))

    async def clusters_post(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.create_cluster(e, t, await _body(r))

    async def cluster_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.get_cluster(e, t, p(r, "cid"))

    async def cluster_put(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.update_cluster(e, t, p(r, "cid"), await _body(r))

    async def cluster_delete(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.delete_cluster(e, t, p(r, "cid"))

    async def upgrade_post(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.upgrade_cluster(e, t, p(r, "cid"), await _body(r))

    async def upgrades_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.available_upgrades(e, t, p(r, "cid"))

    async def credentials_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.credentials(e, t, p(r, "cid"), _int_param(r, "expiry_seconds", 0))

    async def kubeconfig_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        expiry = _int_param(r, "expiry_seconds", 0)
        return ops.kubeconfig(e, t, p(r, "cid"), expiry, r.query_params.get("type"))

    async def associated_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.associated_resources(e, t, p(r, "cid"))

    async def destroy_selective(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.destroy_selective(e, t, p(r, "cid"), await _body(r))

    async def destroy_dangerous(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.destroy_dangerous(e, t, p(r, "cid"))

    async def options_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.options(e, t)

    async def pools_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.list_pools(e, t, p(r, "cid"))

    async def pools_post(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.add_pool(e, t, p(r, "cid"), await _body(r))

    async def pool_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.get_pool(e, t, p(r, "cid"), p(r, "pid"))

    async def pool_put(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.update_pool(e, t, p(r, "cid"), p(r, "pid"), await _body(r))

    async def pool_delete(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        return ops.delete_pool(e, t, p(r, "cid"), p(r, "pid"))

    async def node_delete(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        flags = {name: _int_param(r, name, 0) for name in ("replace", "skip_drain")}
        if any(value not in (0, 1) for value in flags.values()):
            raise ops.ApiError(400, "bad_request", "replace and skip_drain are 0 or 1")
        return ops.delete_node(
            e,
            t,
            p(r, "cid"),
            p(r, "pid"),
            p(r, "nid"),
            replace=flags["replace"] == 1,
            skip_drain=flags["skip_drain"] == 1,
        )

    def scoped(e: DoksEmulator, scope: str) -> None:
        if scope in e.faults.forbidden_scopes:
            raise ops.ApiError(403, "Forbidden", "You are not authorized to perform this operation")

    async def account_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        scoped(e, "account:read")
        return 200, account.account_json(e, t)

    async def droplets_get(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        scoped(e, "droplet:read")
        per_page, page = _int_param(r, "per_page", 20), _int_param(r, "page", 1)
        if not 1 <= per_page <= 200 or page < 1:
            raise ops.ApiError(400, "bad_request", "per_page is 1 to 200 and page 1 or more")
        return 200, account.droplets_json(e, t, per_page=per_page, page=page)

    base = "/v2/kubernetes/clusters"
    destroy = base + "/{cid}/destroy_with_associated_resources"
    routes = [
        Route("/v2/account", endpoint(account_get), methods=["GET"]),
        Route("/v2/droplets", endpoint(droplets_get), methods=["GET"]),
        Route("/v2/kubernetes/options", endpoint(options_get), methods=["GET"]),
        Route(base, endpoint(clusters_get), methods=["GET"]),
        Route(base, endpoint(clusters_post), methods=["POST"]),
        Route(base + "/{cid}", endpoint(cluster_get), methods=["GET"]),
        Route(base + "/{cid}", endpoint(cluster_put), methods=["PUT"]),
        Route(base + "/{cid}", endpoint(cluster_delete), methods=["DELETE"]),
        Route(base + "/{cid}/upgrade", endpoint(upgrade_post), methods=["POST"]),
        Route(base + "/{cid}/upgrades", endpoint(upgrades_get), methods=["GET"]),
        Route(base + "/{cid}/credentials", endpoint(credentials_get), methods=["GET"]),
        Route(base + "/{cid}/kubeconfig", endpoint(kubeconfig_get), methods=["GET"]),
        Route(destroy, endpoint(associated_get), methods=["GET"]),
        Route(destroy + "/selective", endpoint(destroy_selective), methods=["DELETE"]),
        Route(destroy + "/dangerous", endpoint(destroy_dangerous), methods=["DELETE"]),
        Route(base + "/{cid}/node_pools", endpoint(pools_get), methods=["GET"]),
        Route(base + "/{cid}/node_pools", endpoint(pools_post), methods=["POST"]),
        Route(base + "/{cid}/node_pools/{pid}", endpoint(pool_get), methods=["GET"]),
        Route(base + "/{cid}/node_pools/{pid}", endpoint(pool_put), methods=["PUT"]),
        Route(base + "/{cid}/node_pools/{pid}", endpoint(pool_delete), methods=["DELETE"]),
        Route(base + "/{cid}/node_pools/{pid}/nodes/{nid}", endpoint(node_delete), methods=["DELETE"]),
    ]

    async def unknown(e: DoksEmulator, t: str, r: Request) -> ops.Result:
        raise ops.ApiError(404, "not_found", ops.NOT_FOUND)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    routes.append(Route("/{path:path}", endpoint(unknown), methods=methods))
    return Starlette(routes=routes)
