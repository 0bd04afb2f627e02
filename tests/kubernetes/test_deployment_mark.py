"""This deployment's mark (kubernetes/deployment.py): made once per database, kept by every reader of it.

A second reader of the same database (a restarted process, another replica) reads the id the first
made, two made at once agree on one, and another database gets another id.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from better_compute.core.clock import SimClock
from better_compute.kubernetes.deployment import deployment_id
from better_compute.store import Database


async def test_the_id_is_made_once_and_every_reader_of_the_database_reads_it(
    database: Database, clock: SimClock
) -> None:
    made = await deployment_id(database, clock)
    assert re.fullmatch(r"[0-9a-f]{16}", made), made
    restarted = Database(database.url)  # another process on the same database
    try:
        assert await deployment_id(restarted, clock) == made
    finally:
        await restarted.dispose()


async def test_replicas_that_make_it_at_once_agree(database: Database, clock: SimClock) -> None:
    replicas = [Database(database.url) for _ in range(3)]
    try:
        ids = await asyncio.gather(*(deployment_id(db, clock) for db in replicas))
    finally:
        for db in replicas:
            await db.dispose()
    assert len(set(ids)) == 1
    assert await deployment_id(database, clock) == ids[0]


async def test_another_database_is_another_deployment(database: Database, clock: SimClock, tmp_path: Path) -> None:
    other = Database(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        await other.upgrade()
        assert await deployment_id(other, clock) != await deployment_id(database, clock)
    finally:
        await other.dispose()
