"""Reservations per second, single process, on SQLite and on PostgreSQL.

A tenant, a site and a pool of ready nodes with 8 GPUs each are made first; then
`--bookings` reservations of one GPU each are created through
`Reservations.create` (the public service: its own transaction, placement, the
guarded device claim, quota charge and change hook), by `--concurrency` bookers in
one process, and then released the same way. Booking figures include the retries
that contention causes.

    python bench/booking.py --database sqlite
    python bench/booking.py --database postgresql://postgres@127.0.0.1:5432/postgres --concurrency 8
    python bench/booking.py --database sqlite --baseline   # the store's floor: one-INSERT transactions/s
    python bench/booking.py --database postgresql://postgres@127.0.0.1:5432/postgres --sweep
    python bench/booking.py --database postgresql://postgres@127.0.0.1:5432/postgres --concurrency 32 --detail

`--sweep` measures the floor and then 1, 8, 32 and 64 concurrent bookers, each on a
fresh database, in one run, and prints them side by side. `--detail` prints what bounds the
releases: this process's CPU time against the wall time, and how many batches they took.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from better_compute.compute import compute_services, mark_ready, register_node
from better_compute.core.clock import SimClock
from better_compute.iam import Iam
from better_compute.store import Database

GPUS_PER_NODE = 8


async def _fresh_postgres(admin_url: str) -> tuple[Database, str]:
    admin = Database(admin_url)
    name = f"bc_bench_{uuid.uuid4().hex[:8]}"
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    return admin, make_url(admin.url).set(database=name).render_as_string(hide_password=False)


async def _drop_postgres(admin: Database, url: str) -> None:
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    await admin.dispose()


async def measure(url: str, bookings: int, concurrency: int, detail: bool = False) -> tuple[float, float]:
    db = Database(url, pool_size=max(concurrency, 5))
    await db.upgrade()
    clock = SimClock()
    tenant = await Iam(db, clock).create_tenant("bench")
    compute = compute_services(db, clock)
    site = await compute.sites.create(tenant.id, "bench", "shared", "local")
    pool = await compute.pools.create(tenant.id, "bench", site.id, "metal-host", "H100")
    nodes = -(-bookings // GPUS_PER_NODE)
    async with db.transaction() as session:
        for n in range(nodes):
            gpus = [{"index": i, "uuid": f"GPU-{n}-{i}", "model": "H100"} for i in range(GPUS_PER_NODE)]
            node = await register_node(
                session, now=clock.now(), pool_id=pool.id, name=f"node-{n}", inventory={"gpus": gpus}
            )
            await mark_ready(session, node.id, clock.now())

    made: list[str] = []

    async def booker(count: int) -> None:
        for _ in range(count):
            made.append((await compute.reservations.create(tenant.id, pool.id, 1)).id)

    shares = [bookings // concurrency + (1 if i < bookings % concurrency else 0) for i in range(concurrency)]
    started = time.perf_counter()
    await asyncio.gather(*(booker(n) for n in shares))
    booking_rate = bookings / (time.perf_counter() - started)
    assert len(made) == bookings

    async def releaser(ids: list[str]) -> None:
        for reservation_id in ids:
            await compute.reservations.release(tenant.id, reservation_id)

    batches = 0

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal batches
        batches += "UPDATE compute_reservations" in statement  # one a release batch (one a release before)

    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(releaser(made[i::concurrency]) for i in range(concurrency)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    event.remove(db.engine.sync_engine, "before_cursor_execute", count)
    release_rate = bookings / wall
    if detail:
        print(
            f"releases: {wall:.2f} s, this process's CPU {cpu:.2f} s ({cpu / wall:.0%} of it), "
            f"{batches} batches, {wall / max(batches, 1) * 1000:.1f} ms each"
        )
    assert (await compute.quotas.usage(tenant.id, "H100"))[0].used == 0
    await db.dispose()
    return booking_rate, release_rate


async def baseline(url: str, transactions: int) -> float:
    """Transactions/s for one INSERT each through `Database.transaction()`: what any booking pays at least."""
    db = Database(url)
    async with db.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE bench_floor (id INTEGER PRIMARY KEY, v INTEGER)"))
    started = time.perf_counter()
    for n in range(transactions):
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO bench_floor (id, v) VALUES (:id, 1)"), {"id": n})
    rate = transactions / (time.perf_counter() - started)
    await db.dispose()
    return rate


SWEEP = (1, 8, 32, 64)


async def _fresh(database: str, tmp: Path, label: str) -> tuple[str, Any]:
    """A URL for a new, empty database, and what `_done` needs to remove it."""
    if database == "sqlite":
        return f"sqlite:///{tmp / f'{label}.db'}", None
    admin, url = await _fresh_postgres(database)
    return url, admin


async def _done(url: str, admin: Any) -> None:
    if admin is not None:
        await _drop_postgres(admin, url)


async def sweep(database: str, bookings: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url, admin = await _fresh(database, Path(tmp), "floor")
        try:
            floor = await baseline(url, bookings)
        finally:
            await _done(url, admin)
        print(f"floor: {floor:.0f} one-INSERT transactions/s (one at a time)")
        for concurrency in SWEEP:
            url, admin = await _fresh(database, Path(tmp), f"c{concurrency}")
            try:
                booked, released = await measure(url, bookings, concurrency)
            finally:
                await _done(url, admin)
            print(
                f"{concurrency:3d} booker(s): {booked:6.0f} reservations/s ({booked / floor:.1f}x the floor), "
                f"{released:6.0f} releases/s"
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bookings", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--database", default="sqlite", help="'sqlite' (a temporary file) or a postgresql:// URL")
    parser.add_argument("--baseline", action="store_true", help="measure one-INSERT transactions/s instead")
    parser.add_argument("--sweep", action="store_true", help="the floor, then 1, 8, 32 and 64 bookers, in one run")
    parser.add_argument("--detail", action="store_true", help="the releases' CPU share and batches (not with --sweep)")
    args = parser.parse_args()
    if args.sweep:
        await sweep(args.database, args.bookings)
        return
    if args.database == "sqlite":
        backend = "sqlite"
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'bench.db'}"
            if args.baseline:
                print(f"{backend}: {await baseline(url, args.bookings):.0f} one-INSERT transactions/s")
                return
            rates = await measure(url, args.bookings, args.concurrency, args.detail)
    else:
        backend = "postgresql"
        admin, url = await _fresh_postgres(args.database)
        try:
            if args.baseline:
                print(f"{backend}: {await baseline(url, args.bookings):.0f} one-INSERT transactions/s")
                return
            rates = await measure(url, args.bookings, args.concurrency, args.detail)
        finally:
            await _drop_postgres(admin, url)
    print(
        f"{backend}: {args.bookings} bookings by {args.concurrency} booker(s): "
        f"{rates[0]:.0f} reservations/s, {rates[1]:.0f} releases/s"
    )


if __name__ == "__main__":
    asyncio.run(main())
