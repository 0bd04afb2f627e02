"""The web console's cost to the API when no one is looking: /v1 latency with the console and without it.

    python bench/console.py                    # SQLite, 21 rounds of 100 requests a route
    python bench/console.py --rounds 41 --requests 200

One Compute on one SQLite file (a tenant, a pool, an API key) and two apps over it: `create_app`'s,
and the same app with the console's /ui routes taken out of its router (the API-key middleware's
extra public prefix, one string comparison, stays in both). Each round times `--requests` requests
of each route through httpx's ASGI transport on each app, alternating which app goes first, and the
figures are the medians over the rounds of the mean time a request, with their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from fastapi import FastAPI

from better_compute.api import create_app
from better_compute.server import better_compute

SECRET = "a-bench-secret-of-at-least-32-characters-x"
ROUTES = ("/healthz", "/v1/whoami", "/v1/pools", "/v1/nodes")


def without_console(app: FastAPI) -> FastAPI:
    app.router.routes[:] = [r for r in app.router.routes if not getattr(r, "path", "").startswith("/ui")]
    return app


async def timed(client: httpx.AsyncClient, route: str, requests: int) -> float:
    start = time.perf_counter()
    for _ in range(requests):
        response = await client.get(route)
        assert response.status_code == 200, response.text
    return (time.perf_counter() - start) / requests


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        compute = better_compute(database=f"sqlite:///{Path(directory) / 'bench.db'}", secret=SECRET)
        await compute.migrate()
        apps = {"with console": create_app(compute), "without": without_console(create_app(compute))}
        async with apps["with console"].router.lifespan_context(apps["with console"]):
            tenant = await compute.iam.create_tenant("bench")
            site = await compute.sites.create(tenant.id, "k8s", "shared", "tor1")
            await compute.pools.create(tenant.id, "gpu", site.id, "metal-host", "H100", {"kubernetes": {}})
            _, key = await compute.iam.create_api_key(tenant.id)
            clients = {
                name: httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),
                    base_url="http://bench",
                    headers={"Authorization": f"Bearer {key}"},
                )
                for name, app in apps.items()
            }
            seconds: dict[tuple[str, str], list[float]] = {}
            for round_ in range(args.rounds):
                order = list(clients) if round_ % 2 == 0 else list(clients)[::-1]
                for route in ROUTES:
                    for name in order:
                        seconds.setdefault((name, route), []).append(await timed(clients[name], route, args.requests))
            for client in clients.values():
                await client.aclose()
        await compute.close()
    print(f"{'route':<14}{'without (µs)':>14}{'with console (µs)':>20}{'ratio':>8}")
    for route in ROUTES:
        bare = statistics.median(seconds[("without", route)]) * 1e6
        console = statistics.median(seconds[("with console", route)]) * 1e6
        print(f"{route:<14}{bare:>14.0f}{console:>20.0f}{console / bare:>8.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--requests", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
