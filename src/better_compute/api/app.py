"""create_app(compute): the one ASGI app of `better-compute serve`.

The lifespan starts the Compute's engine workers and closes what it opened in reverse
order. The app mounts the web console at /ui (api/console, signed in by its own cookie), its own routes (health, metrics, whoami), the operator's routes
(one file each, one line each below) and every module's routers behind the API-key
middleware and then the input boundary (api/boundary.py); every route is in the OpenAPI
document with its error responses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from better_compute.api import (
    api_keys,
    clusters,
    console,
    events,
    join_tokens,
    nodes,
    pools,
    reservations,
    secrets,
    sweep,
    tenants,
)
from better_compute.api.auth import ALWAYS_PUBLIC, ApiKeyMiddleware
from better_compute.api.boundary import InputBoundaryMiddleware
from better_compute.api.errors import ERROR_RESPONSES, DatabaseUnavailableMiddleware, install_error_handlers
from better_compute.api.openapi import install_openapi
from better_compute.api.routes import router
from better_compute.api.tracing import TracingMiddleware
from better_compute.core import tracing
from better_compute.gateway.routes import NodeSocketFirst
from better_compute.server import Compute

__all__ = ["create_app"]


def create_app(compute: Compute) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.push_async_callback(compute.close)
            await compute.start()
            yield

    app = NodeSocketFirst(title="better-compute", lifespan=lifespan)
    app.state.compute = compute
    install_error_handlers(app)
    install_openapi(app, public=(*ALWAYS_PUBLIC, *compute.public_prefixes()))
    app.include_router(router, responses=ERROR_RESPONSES)
    app.include_router(tenants.router, responses=ERROR_RESPONSES)
    app.include_router(api_keys.router, responses=ERROR_RESPONSES)
    app.include_router(secrets.router, responses=ERROR_RESPONSES)
    app.include_router(pools.router, responses=ERROR_RESPONSES)
    app.include_router(nodes.router, responses=ERROR_RESPONSES)
    app.include_router(reservations.router, responses=ERROR_RESPONSES)
    app.include_router(join_tokens.router, responses=ERROR_RESPONSES)
    app.include_router(events.router, responses=ERROR_RESPONSES)
    app.include_router(console.router)  # the web console (api/console): its own session cookie, not a bearer key
    for module in compute.modules.values():
        if module.name == "kubernetes":  # its views are the operator's (ops.clusters), its routes here
            app.include_router(clusters.router, responses=ERROR_RESPONSES)
            app.include_router(sweep.router, responses=ERROR_RESPONSES)
        for module_router in module.routers():
            app.include_router(module_router, responses=ERROR_RESPONSES)
    # Added first, so it runs inside the API-key check: a stranger's body is never read.
    app.add_middleware(InputBoundaryMiddleware)
    public = (console.PREFIX, *compute.public_prefixes())
    app.add_middleware(ApiKeyMiddleware, iam=compute.iam, public_prefixes=public)
    app.add_middleware(DatabaseUnavailableMiddleware)  # outside the API-key check, which reads the database
    if tracing.enabled():  # outermost: the request's span covers all of the above; off, not mounted at all
        app.add_middleware(TracingMiddleware)
    if "gateway" in compute.modules:  # the node WebSocket skips every layer above (gateway/routes.py)
        app.gateway = compute.gateway
    return app
