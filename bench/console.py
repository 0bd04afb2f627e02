"""The web console's cost to the API when no one is looking: /v1 latency with the console and without it.

    python bench/console.py                    # SQLite, 40 blocks of 25 request triples a route
    python bench/console.py --blocks 80 --per-block 50

One Compute on one SQLite file (a tenant, a pool, an API key) and three apps over it: `create_app`'s,
the same app with the console's /ui routes taken out of its router (the API-key middleware's extra
public prefix, one string comparison, stays in both), and a second app without the console: the
control, whose ratio to the first one without is what the machine's noise alone makes of two equal
apps. Requests go one at a time through httpx's ASGI transport, interleaved: each triple asks the
same route of the three apps, in an order rotating from triple to triple, so a busy moment of the
machine falls on all three alike. Each request is timed in CPU time of this process
(`time.process_time_ns`, every thread, aiosqlite's included), which other processes' load barely
moves, and in wall time beside it.

The figure for a route is the ratio of the mean CPU time a request with the console to the mean
without it, per block of `--per-block` triples; its median over the blocks, and a 95% interval by
bootstrap over the blocks (2,000 resamples, a fixed seed). The control's ratio is given the same
way: the console costs nothing measurable when its interval lies within the control's spread.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import FastAPI

from better_compute.api import create_app
from better_compute.server import better_compute

SECRET = "a-bench-secret-of-at-least-32-characters-x"
ROUTES = ("/healthz", "/v1/whoami", "/v1/pools", "/v1/nodes")
APPS = ("with console", "without", "control")
RESAMPLES = 2000
Interval = tuple[float, float, float]
"""A median and its 95% interval."""


@dataclass
class Result:
    cpu: dict[str, float]
    """CPU µs a request, by app: the median of the block means."""
    wall: dict[str, float]
    console: Interval
    """with console / without."""
    control: Interval
    """control / without: two equal apps, as the machine's noise makes them."""


def without_console(app: FastAPI) -> FastAPI:
    app.router.routes[:] = [r for r in app.router.routes if not getattr(r, "path", "").startswith("/ui")]
    return app


async def timed(client: httpx.AsyncClient, route: str) -> tuple[int, int]:
    """One request's CPU and wall time, in ns."""
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    response = await client.get(route)
    cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
    assert response.status_code == 200, response.text
    return cpu, wall


def interval(ratios: list[float], rng: random.Random) -> Interval:
    """The median of the block ratios, and a 95% bootstrap interval of that median."""
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(RESAMPLES))
    return statistics.median(ratios), medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


async def measure(clients: dict[str, httpx.AsyncClient], route: str, args: argparse.Namespace) -> Result:
    cpu_ratio: list[float] = []
    control_ratio: list[float] = []
    means: dict[str, list[float]] = {name: [] for name in APPS}
    walls: dict[str, list[float]] = {name: [] for name in APPS}
    turn = 0
    for name in APPS:  # warm each app's route (first-request imports, caches) before anything counts
        for _ in range(20):
            await timed(clients[name], route)
    for _ in range(args.blocks):
        cpu: dict[str, list[int]] = {name: [] for name in APPS}
        wall: dict[str, list[int]] = {name: [] for name in APPS}
        for _ in range(args.per_block):
            order = APPS[turn % 3 :] + APPS[: turn % 3]
            turn += 1
            for name in order:
                spent, took = await timed(clients[name], route)
                cpu[name].append(spent)
                wall[name].append(took)
        block = {name: statistics.fmean(cpu[name]) for name in APPS}
        for name in APPS:
            means[name].append(block[name])
            walls[name].append(statistics.fmean(wall[name]))
        cpu_ratio.append(block["with console"] / block["without"])
        control_ratio.append(block["control"] / block["without"])
    rng = random.Random(30)
    return Result(
        cpu={name: statistics.median(values) / 1e3 for name, values in means.items()},
        wall={name: statistics.median(values) / 1e3 for name, values in walls.items()},
        console=interval(cpu_ratio, rng),
        control=interval(control_ratio, rng),
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        compute = better_compute(database=f"sqlite:///{Path(directory) / 'bench.db'}", secret=SECRET)
        await compute.migrate()
        apps = {
            "with console": create_app(compute),
            "without": without_console(create_app(compute)),
            "control": without_console(create_app(compute)),
        }
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
            results = {route: await measure(clients, route, args) for route in ROUTES}
            for client in clients.values():
                await client.aclose()
        await compute.close()
    print(f"{args.blocks} blocks of {args.per_block} triples a route; CPU µs a request (median of the block means)")
    print(
        f"{'route':<12}{'without':>9}{'with':>9}{'control':>9}  {'with / without [95%]':<24}"
        f"{'control / without [95%]':<26}{'wall µs without / with':>22}"
    )
    for route, r in results.items():
        cpu, wall, console, control = r.cpu, r.wall, r.console, r.control
        print(
            f"{route:<12}{cpu['without']:>9.0f}{cpu['with console']:>9.0f}{cpu['control']:>9.0f}  "
            f"{console[0]:.3f} [{console[1]:.3f}, {console[2]:.3f}]{'':<4}"
            f"{control[0]:.3f} [{control[1]:.3f}, {control[2]:.3f}]{'':<6}"
            f"{wall['without']:>9.0f} / {wall['with console']:.0f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--per-block", type=int, default=25)
    asyncio.run(main(parser.parse_args()))
