"""create_app(compute): the one ASGI app of `better-compute serve`.

The lifespan starts the Compute's engine workers and closes what it opened in reverse
order. The app mounts its own routes (health, metrics, whoami) and every module's
routers behind the API-key middleware.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from better_compute.api.auth import ApiKeyMiddleware
from better_compute.api.errors import install_error_handlers
from better_compute.api.routes import router
from better_compute.server import Compute

__all__ = ["create_app"]


def create_app(compute: Compute) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.push_async_callback(compute.close)
            await compute.start()
            yield

    app = FastAPI(title="better-compute", lifespan=lifespan)
    app.state.compute = compute
    install_error_handlers(app)
    app.include_router(router)
    for module_router in compute.routers():
        app.include_router(module_router)
    app.add_middleware(ApiKeyMiddleware, iam=compute.iam, public_prefixes=compute.public_prefixes())
    return app
