"""ops_0002 on a database that already holds Idempotency-Key records (ops_0001's plain keys): a booking's
retry made before the upgrade still answers that booking after it, and the key is no longer stored."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.ops.idempotency import claim
from better_compute.server import better_compute
from better_compute.store import Database
from better_compute.store.migrate import alembic_config, upgrade

PARAMS = {"pool": "gpu-fleet", "gpus": 1, "spot": False}


async def _migrate_to(db: Database, revision: str) -> None:
    def run(sync_connection: object) -> None:
        config = alembic_config(db.url)
        config.attributes["connection"] = sync_connection
        command.upgrade(config, revision)

    async with db.engine.begin() as connection:
        await connection.run_sync(run)


async def test_records_made_before_the_upgrade_answer_their_retries_after_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database(url)
    await _migrate_to(db, "ops_0001")
    old_hash = hashlib.sha256(json.dumps(PARAMS, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    async with db.engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO iam_tenants (id, name, created_at) VALUES ('ten_old', 'old', :now)"), {"now": now}
        )
        await connection.execute(
            text(
                "INSERT INTO ops_idempotency_keys (tenant_id, operation, key, request_hash, resource_id, created_at)"
                " VALUES ('ten_old', 'reservations.create', 'job-before-upgrade', :hash, 'res_made_before', :now)"
            ),
            {"hash": old_hash, "now": now},
        )
    await upgrade(db)
    async with db.engine.connect() as connection:
        stored = (await connection.execute(text("SELECT * FROM ops_idempotency_keys"))).all()
    assert "job-before-upgrade" not in repr(stored)
    await db.dispose()
    compute = better_compute(database=url, secret="a-migration-test-secret-of-32-characters", clock=SimClock(now))
    try:
        again = await claim(compute, "ten_old", "reservations.create", "job-before-upgrade", PARAMS, lambda: "res_new")
        assert again == "res_made_before"
        with pytest.raises(ComputeError) as refused:
            await claim(compute, "ten_old", "reservations.create", "job-before-upgrade", {**PARAMS, "gpus": 2}, str)
        assert refused.value.path == "/headers/Idempotency-Key"
    finally:
        await compute.close()
