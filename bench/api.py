"""The HTTP API's requests per second with wrk, as ratios to a bare FastAPI app measured in the same run.

    python bench/api.py                                  # SQLite and PostgreSQL (127.0.0.1:5432)
    python bench/api.py --database sqlite --profile /v1/whoami   # and py-spy over that route's run

For each database a world is made (a tenant with `--pools` pools, one ready node of 2 GPUs each and
one reservation per pool), then `better-compute serve` is started on 127.0.0.1 with it, and so is a
bare FastAPI app in the same virtual environment whose one route runs `SELECT 1` through
SQLAlchemy's async engine on the same database. wrk (`--threads` threads, `--connections`
connections, `--seconds` s a run) measures the bare app first and last, and each route of ours in
between; the figures are printed with their ratio to the mean of the bare app's two runs, so a busy
machine shifts both sides alike.

wrk: used from PATH; if it is missing the bench runs `apt-get install -y wrk` (after `apt-get update`
if the package is not known yet) and says so. `--profile ROUTE` records the serving process with
`py-spy record` (in the virtual environment) during that route's run and prints the functions where
most samples were, by own time and by time inside.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
SECRET = "a-bench-secret-of-at-least-32-characters-x"
ROUTES = ("/healthz", "/v1/whoami", "/v1/pools", "/v1/reservations", "/v1/nodes")
BARE_APP = """
import os
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

engine = create_async_engine(os.environ["BENCH_DATABASE_URL"])
app = FastAPI()


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
    return {"status": "ok"}
"""


def ensure_wrk() -> str:
    """wrk from PATH, installed with apt-get if it is missing."""
    found = shutil.which("wrk")
    if found:
        return found
    print("wrk is not on PATH: running `apt-get install -y wrk`", file=sys.stderr)
    if subprocess.run(["apt-get", "install", "-y", "wrk"], check=False).returncode != 0:
        print("not known yet: running `apt-get update` first", file=sys.stderr)
        subprocess.run(["apt-get", "update"], check=True)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True)
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk could not be installed")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def make_world(url: str, pools: int) -> str:
    """The world, migrated and filled; answers an API key of its tenant."""
    from better_compute.compute import mark_ready, register_node, set_connected
    from better_compute.server import better_compute

    compute = better_compute(database=url, secret=SECRET)
    await compute.migrate()
    tenant = await compute.iam.create_tenant("bench")
    _, key = await compute.iam.create_api_key(tenant.id)
    site = await compute.sites.create(tenant.id, "k8s", "shared", "tor1")
    for index in range(pools):
        pool = await compute.pools.create(
            tenant.id, f"pool-{index:03d}", site.id, "metal-host", "H100", {"kubernetes": {}}
        )
        name = f"node-{index:03d}"
        inventory = {
            "os": {"hostname": name, "kubernetesNodeName": name},
            "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 80GB HBM3"} for i in range(2)],
        }
        async with compute.reservations.transaction() as session:
            now = compute.clock.now()
            node = await register_node(session, now=now, pool_id=pool.id, name=name, inventory=inventory, labels={})
            await mark_ready(session, node.id, now)
            await set_connected(session, node.id, True, now)
        await compute.reservations.create(tenant.id, pool.id, 1)
    await compute.close()
    return key


@contextlib.contextmanager
def serving(argv: list[str], port: int, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(
                    f"{argv[:3]} exited: {process.stderr.read().decode()[-2000:] if process.stderr else ''}"
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Run:
    rps: float
    latency_ms: float
    errors: int


def wrk(binary: str, url: str, args: argparse.Namespace, key: str | None) -> Run:
    command = [binary, f"-t{args.threads}", f"-c{args.connections}", f"-d{args.seconds}s", "--latency"]
    if key:
        command += ["-H", f"Authorization: Bearer {key}"]
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    latency = re.search(r"Latency\s+([\d.]+)(us|ms|s)", output)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    latency_ms = float(latency.group(1)) * scale[latency.group(2)] if latency else float("nan")
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses:\s+(\d+)", output))
    errors += sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    return Run(rps, latency_ms, errors)


def profile_summary(raw: Path, top: int = 25) -> str:
    """py-spy's collapsed stacks as the functions with the most samples: own time, then time inside."""
    own: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[frames[-1]] += samples
        for frame in set(frames):
            inside[frame] += samples
    lines = [f"{total} samples; own time:"]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    lines.append("time inside (own + callees):")
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inside.most_common(top)]
    return "\n".join(lines)


def bench_database(name: str, url: str, args: argparse.Namespace, binary: str, workdir: Path) -> None:
    key = asyncio.run(make_world(url, args.pools))
    ours, bare = free_port(), free_port()
    env = {
        "BC_DATABASE_URL": url,
        "BC_SECRET": SECRET,
        "BENCH_DATABASE_URL": url.replace("sqlite://", "sqlite+aiosqlite://").replace(
            "postgresql://", "postgresql+asyncpg://"
        ),
    }
    (workdir / "bare_app.py").write_text(BARE_APP)
    serve = [
        str(Path(sys.executable).with_name("better-compute")),
        "serve",
        "--port",
        str(ours),
        "--log-level",
        "warning",
    ]
    bare_cmd = [sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(bare), "--log-level", "warning"]
    env_bare = {**env, "PYTHONPATH": f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with serving(serve, ours, env) as server, serving(bare_cmd, bare, env_bare):
        for route in ROUTES:  # warm both: connection pools, statement caches
            wrk_quick = argparse.Namespace(**{**vars(args), "seconds": 1})
            wrk(binary, f"http://127.0.0.1:{ours}{route}", wrk_quick, key)
        wrk(binary, f"http://127.0.0.1:{bare}/healthz", argparse.Namespace(**{**vars(args), "seconds": 1}), None)
        first = wrk(binary, f"http://127.0.0.1:{bare}/healthz", args, None)
        results: dict[str, Run] = {}
        for route in ROUTES:
            spy = None
            if args.profile == route:
                raw = workdir / f"profile-{name}{route.replace('/', '-')}.txt"
                spy_bin = str(Path(sys.executable).with_name("py-spy"))
                spy = subprocess.Popen(
                    [
                        spy_bin,
                        "record",
                        "--pid",
                        str(server.pid),
                        "--duration",
                        str(args.seconds),
                        "--format",
                        "raw",
                        "--output",
                        str(raw),
                        "--nonblocking",
                        "--rate",
                        "200",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            results[route] = wrk(binary, f"http://127.0.0.1:{ours}{route}", args, key)
            if spy is not None:
                spy.wait(30)
                print(f"\npy-spy over {name} {route}:\n{profile_summary(raw)}\n")
        last = wrk(binary, f"http://127.0.0.1:{bare}/healthz", args, None)
    baseline = (first.rps + last.rps) / 2
    print(f"\n{name}: bare FastAPI + SELECT 1: {first.rps:,.0f} and {last.rps:,.0f} req/s (mean {baseline:,.0f})")
    print(f"{'route':<20}{'req/s':>10}{'avg ms':>10}{'errors':>8}{'x bare':>9}")
    for route, run in results.items():
        print(f"{route:<20}{run.rps:>10,.0f}{run.latency_ms:>10.1f}{run.errors:>8}{run.rps / baseline:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--postgres", default=POSTGRES, help="an admin URL of a local PostgreSQL")
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=10, help="each wrk run (at most 10)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--profile", choices=ROUTES, help="py-spy over the server during this route's run")
    args = parser.parse_args()
    args.seconds = min(args.seconds, 10)
    binary = ensure_wrk()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        workdir = Path(tmp)
        if args.database in ("sqlite", "both"):
            bench_database("SQLite", f"sqlite:///{workdir / 'api.db'}", args, binary, workdir)
        if args.database in ("postgresql", "both"):
            from better_compute.store import Database

            admin = Database(args.postgres)
            name = f"bc_bench_api_{uuid.uuid4().hex[:8]}"

            async def create() -> None:
                async with admin.engine.connect() as conn:
                    conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    await conn.execute(text(f'CREATE DATABASE "{name}"'))
                await admin.dispose()

            async def drop() -> None:
                async with admin.engine.connect() as conn:
                    conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                await admin.dispose()

            asyncio.run(create())
            try:
                url = make_url(args.postgres).set(database=name).render_as_string(hide_password=False)
                bench_database("PostgreSQL", url, args, binary, workdir)
            finally:
                asyncio.run(drop())


if __name__ == "__main__":
    main()
