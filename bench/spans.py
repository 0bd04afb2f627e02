"""What the OpenTelemetry spans cost: `better-compute serve` with tracing off and on, in one run.

    python bench/spans.py                         # SQLite
    python bench/spans.py --database postgresql   # a fresh database on 127.0.0.1:5432

One world (bench/api.py's: a tenant with `--pools` pools of one ready 2-GPU node) is served by
`better-compute serve` four times, alternating: tracing off, on, off, on. "On" sets
OTEL_EXPORTER_OTLP_ENDPOINT to a collector in this process that accepts every export and counts
its spans (so the SDK's batching and the OTLP/HTTP encoding are paid for). Each serving measures
`/v1/whoami` with wrk, then booking throughput: `--concurrency` clients, each booking one GPU
and releasing it, over HTTP, for `--seconds`. Figures: the median of the two runs of each mode,
and on/off as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from api import POSTGRES, SECRET, ensure_wrk, free_port, make_world, serving, wrk  # bench/api.py


class Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that counts the spans it is sent."""

    spans = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = ExportTraceServiceRequest.FromString(body)
        Sink.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


async def bookings_per_second(base: str, key: str, pools: int, concurrency: int, seconds: float) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    auth = {"Authorization": f"Bearer {key}"}

    async def client(n: int) -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=base, headers=auth, timeout=30) as http:
            pool = f"pool-{n % pools:03d}"
            while time.monotonic() < deadline:
                booked = await http.post("/v1/reservations", json={"pool": pool, "gpus": 1})
                if booked.status_code != 201:
                    raise SystemExit(f"booking answered {booked.status_code}: {booked.text}")
                released = await http.post(f"/v1/reservations/{booked.json()['id']}/release")
                if released.status_code != 200:
                    raise SystemExit(f"release answered {released.status_code}: {released.text}")
                done += 1

    started = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(concurrency)))
    return done / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--postgres", default=POSTGRES)
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args()
    binary = ensure_wrk()
    collector = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    with tempfile.TemporaryDirectory(prefix="bench-spans-") as tmp:
        if args.database == "sqlite":
            url = f"sqlite:///{Path(tmp) / 'spans.db'}"
        else:
            name = f"bc_bench_spans_{uuid.uuid4().hex[:8]}"
            url = make_url(args.postgres).set(database=name).render_as_string(hide_password=False)
            asyncio.run(_database(args.postgres, f'CREATE DATABASE "{name}"'))
        try:
            key = asyncio.run(make_world(url, args.pools))
            figures: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
            for mode in ("off", "on", "off", "on"):
                port = free_port()
                env = {"BC_DATABASE_URL": url, "BC_SECRET": SECRET}
                if mode == "on":
                    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
                argv = [str(Path(sys.executable).with_name("better-compute")), "serve", "--port", str(port)]
                argv += ["--log-level", "warning"]
                with serving(argv, port, env):
                    whoami = wrk(binary, f"http://127.0.0.1:{port}/v1/whoami", args, key)
                    booked = asyncio.run(
                        bookings_per_second(f"http://127.0.0.1:{port}", key, args.pools, args.concurrency, args.seconds)
                    )
                figures[mode].append((whoami.rps, booked))
                print(f"tracing {mode:3}: /v1/whoami {whoami.rps:8.0f} req/s   bookings {booked:7.1f}/s", flush=True)
        finally:
            if args.database == "postgresql":
                asyncio.run(_database(args.postgres, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    off = [statistics.median(v) for v in zip(*figures["off"], strict=True)]
    on = [statistics.median(v) for v in zip(*figures["on"], strict=True)]
    print(f"median /v1/whoami: off {off[0]:.0f}, on {on[0]:.0f} req/s ({on[0] / off[0]:.2f}x)")
    print(f"median bookings (book + release over HTTP): off {off[1]:.1f}, on {on[1]:.1f}/s ({on[1] / off[1]:.2f}x)")
    print(f"spans the collector received: {Sink.spans}")


async def _database(admin_url: str, statement: str) -> None:
    from better_compute.store import Database

    admin = Database(admin_url)
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(statement))
    await admin.dispose()


if __name__ == "__main__":
    main()
