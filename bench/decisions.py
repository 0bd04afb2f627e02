"""What the decision log costs booking: bookings/s with the log on and off (`decisions.suspended()`), in one run.

    python bench/decisions.py                                                   # SQLite
    python bench/decisions.py --database postgresql://postgres@127.0.0.1:5432/postgres

Each measurement is bench/booking.py's (`--bookings` one-GPU reservations through
`Reservations.create` by N concurrent bookers, then released), each on a fresh database.
With the log on, every booking writes its `reservation.booked` event (on PostgreSQL inside
the one `compute_book_batch` statement) and every release its `reservation.released`; off,
neither. For each concurrency the runs go on, off, off, on (`--rounds` times), so that a load
drifting during the run weighs on both modes alike; the figures are the medians of each mode,
and on/off as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from booking import _done, _fresh, measure  # bench/booking.py

from better_compute.decisions import suspended

CONCURRENCY = (1, 32)


async def once(database: str, tmp: Path, label: str, bookings: int, concurrency: int, log: bool) -> tuple[float, float]:
    url, admin = await _fresh(database, tmp, label)
    try:
        if log:
            return await measure(url, bookings, concurrency)
        with suspended():
            return await measure(url, bookings, concurrency)
    finally:
        await _done(url, admin)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bookings", type=int, default=500)
    parser.add_argument("--database", default="sqlite", help="'sqlite' (a temporary file) or a postgresql:// URL")
    parser.add_argument("--rounds", type=int, default=2, help="how many on-off-off-on quartets per concurrency")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for concurrency in CONCURRENCY:
            rates: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for n in range(2 * args.rounds):
                for log in (True, False) if n % 2 == 0 else (False, True):
                    label = f"c{concurrency}-{n}-{'on' if log else 'off'}"
                    rates[log].append(await once(args.database, Path(tmp), label, args.bookings, concurrency, log))
            on = [statistics.median(r[i] for r in rates[True]) for i in (0, 1)]
            off = [statistics.median(r[i] for r in rates[False]) for i in (0, 1)]
            print(
                f"{concurrency:3d} booker(s): bookings/s on {on[0]:.0f}, off {off[0]:.0f} ({on[0] / off[0]:.2f}x); "
                f"releases/s on {on[1]:.0f}, off {off[1]:.0f} ({on[1] / off[1]:.2f}x)"
            )


if __name__ == "__main__":
    asyncio.run(main())
