"""No-op work items per second through the engine, on SQLite and on PostgreSQL.

Each item is enqueued, claimed under a lease, run by a reconciler that does nothing
and completed under its token: the engine's own overhead per item. Items are driven
by `Engine.run_until_idle` on a SimClock (batches of claims, concurrent runs) and,
with --serve, by `Engine.serve` on the real clock.

    python bench/engine.py --items 5000 --database sqlite
    python bench/engine.py --items 5000 --database postgresql://postgres@127.0.0.1:5432/postgres

With --replicas N (PostgreSQL only), N engines serve one database, each on a
connection pool of its own as separate processes would be, and a writer that serves
no engine (an API replica) queues one item at a time: the figure is the time from
that commit to the item's first run on a replica, which learns of it only through
LISTEN/NOTIFY (engine/notify.py). The baseline, in the same run, is the same with
the listener left out, so the replicas find the item at their next 1 s poll.

    python bench/engine.py --replicas 2 --database postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import func, select, text

from better_compute.core.clock import SimClock, SystemClock
from better_compute.engine import Engine, Outcome, RunContext, enqueue
from better_compute.engine.models import WorkItem
from better_compute.store import Database


class NoOp:
    kind = "bench-noop"

    def __init__(self, items: int) -> None:
        self.runs = 0
        self.items = items
        self.all_ran = asyncio.Event()

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.runs += 1
        if self.runs >= self.items:
            self.all_ran.set()
        return Outcome.done()


async def _fresh_postgres(admin_url: str) -> tuple[Database, str]:
    admin = Database(admin_url)
    name = f"bc_bench_{uuid.uuid4().hex[:8]}"
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    from sqlalchemy.engine import make_url

    url = make_url(admin.url).set(database=name).render_as_string(hide_password=False)
    return admin, url


async def _drop_postgres(admin: Database, url: str) -> None:
    from sqlalchemy.engine import make_url

    name = make_url(url).database
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    await admin.dispose()


async def measure(url: str, items: int, serve: bool) -> float:
    db = Database(url)
    await db.upgrade()
    reconciler = NoOp(items)
    clock = SystemClock() if serve else SimClock()
    engine = Engine(db, clock, [reconciler], batch_size=500, concurrency=500)
    async with db.transaction() as session:
        for n in range(items):
            await enqueue(session, kind=NoOp.kind, key=f"item-{n}", now=clock.now())
    started = time.perf_counter()
    if serve:
        server = asyncio.create_task(engine.serve())
        engine.wake()
        await reconciler.all_ran.wait()
        await _until_applied(db)
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    else:
        await engine.run_until_idle()
    elapsed = time.perf_counter() - started
    await db.dispose()
    if reconciler.runs != items:
        raise RuntimeError(f"ran {reconciler.runs} of {items} items")
    return items / elapsed


async def _until_applied(db: Database) -> None:
    """Wait for the last completions: no item may still hold a lease."""
    query = select(func.count()).select_from(WorkItem).where(WorkItem.lock_token.is_not(None))
    for _ in range(100_000):
        async with db.session() as session:
            if (await session.execute(query)).scalar_one() == 0:
                return
        await asyncio.sleep(0.001)
    raise RuntimeError("completions were never applied")


class Stopwatch:
    """Records when each key first runs."""

    kind = "bench-wake"

    def __init__(self) -> None:
        self.first_run: dict[str, float] = {}
        self.ran: dict[str, asyncio.Event] = {}

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.first_run.setdefault(key, time.perf_counter())
        self.ran.setdefault(key, asyncio.Event()).set()
        return Outcome.done()


async def _never_listen(*_: object, **__: object) -> None:
    await asyncio.Event().wait()


async def wake_latencies(url: str, replicas: int, samples: int, listen: bool) -> list[float]:
    """Seconds from a writer's commit to the item's first run on one of `replicas` serving engines."""
    import better_compute.engine.engine as engine_module

    listener = engine_module.listen_for_work
    if not listen:
        engine_module.listen_for_work = _never_listen  # type: ignore[assignment]
    stopwatch = Stopwatch()
    clock = SystemClock()
    databases = [Database(url) for _ in range(replicas)]
    writer = Database(url)
    engines = [Engine(db, clock, [stopwatch], owner=f"replica-{n}", poll_seconds=1.0) for n, db in enumerate(databases)]
    servers = [asyncio.create_task(e.serve()) for e in engines]
    latencies = []
    try:
        await asyncio.sleep(0.5)  # the listeners connect
        for n in range(samples):
            key = f"wake-{n}"
            stopwatch.ran[key] = asyncio.Event()
            async with writer.transaction() as session:
                await enqueue(session, kind=Stopwatch.kind, key=key, now=clock.now())
            committed = time.perf_counter()
            await asyncio.wait_for(stopwatch.ran[key].wait(), timeout=10)
            latencies.append(max(0.0, stopwatch.first_run[key] - committed))
            await asyncio.sleep(random.uniform(0.0, 0.05))
    finally:
        for server in servers:
            server.cancel()
        await asyncio.gather(*servers, return_exceptions=True)
        engine_module.listen_for_work = listener  # type: ignore[assignment]
        for db in [*databases, writer]:
            await db.dispose()
    return latencies


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def replicas_main(database: str, replicas: int, samples: int) -> None:
    for listen in (False, True):
        admin, url = await _fresh_postgres(database)
        try:
            db = Database(url)
            await db.upgrade()
            await db.dispose()
            latencies = await wake_latencies(url, replicas, samples, listen)
        finally:
            await _drop_postgres(admin, url)
        label = "LISTEN/NOTIFY" if listen else "baseline, 1 s poll only"
        print(
            f"apply -> first reconcile on another replica ({replicas} replicas, {samples} samples, {label}): "
            f"p50 {1000 * _percentile(latencies, 0.5):.1f} ms, p99 {1000 * _percentile(latencies, 0.99):.1f} ms, "
            f"max {1000 * max(latencies):.1f} ms"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--database", default="sqlite", help="'sqlite' (a temporary file) or a postgresql:// URL")
    parser.add_argument("--serve", action="store_true", help="drive the items with serve() on the real clock")
    parser.add_argument("--replicas", type=int, default=0, help="measure wake-ups across this many replicas")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    if args.replicas:
        if args.database == "sqlite":
            raise SystemExit("--replicas needs a postgresql:// --database")
        await replicas_main(args.database, args.replicas, args.samples)
        return
    mode = "serve" if args.serve else "run_until_idle"
    if args.database == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            rate = await measure(f"sqlite:///{Path(tmp) / 'bench.db'}", args.items, args.serve)
        backend = "sqlite"
    else:
        admin, url = await _fresh_postgres(args.database)
        try:
            rate = await measure(url, args.items, args.serve)
        finally:
            await _drop_postgres(admin, url)
        backend = "postgresql"
    print(f"engine no-op items/s ({backend}, {mode}, {args.items} items): {rate:,.0f}")


if __name__ == "__main__":
    asyncio.run(main())
