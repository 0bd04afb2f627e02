"""The `database` fixture's PostgreSQL reset leaves what TRUNCATE ... RESTART IDENTITY CASCADE left."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from better_compute.store import Database
from postgres_reset import reset_postgres

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)

FILL = [
    "INSERT INTO iam_tenants VALUES ('t1', 'acme', now())",
    "INSERT INTO compute_sites VALUES ('s1', 't1', 'main', 'cloud', NULL, now(), now())",
    "INSERT INTO compute_pools VALUES ('p1', 't1', 'gpus', 's1', 'gpu', NULL, '{}', 'ready', now(), now())",
    "INSERT INTO decisions_log (id, at, tenant_id, kind, reason, gpu_ids, details)"
    " VALUES ('d1', now(), 't1', 'k', 'r', '[]', '{}'), ('d2', now(), 't1', 'k', 'r', '[]', '{}')",
]


async def counts(db: Database) -> dict[str, int]:
    async with db.engine.connect() as conn:
        tables = (await conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))).scalars()
        return {t: int(await conn.scalar(text(f'SELECT count(*) FROM "{t}"')) or 0) for t in list(tables)}


async def fill(db: Database) -> None:
    async with db.engine.begin() as conn:
        for statement in FILL:
            await conn.execute(text(statement))


async def test_every_table_is_emptied_and_every_sequence_restarts(database: Database) -> None:
    await fill(database)
    filled = await counts(database)
    assert filled["decisions_log"] == 2 and filled["compute_pools"] == 1
    await reset_postgres(database)
    after = await counts(database)
    assert {t: n for t, n in after.items() if n and t != "alembic_version"} == {}
    assert after["alembic_version"] == filled["alembic_version"] > 0  # the schema's revisions are kept
    async with database.engine.connect() as conn:
        assert await conn.scalar(text("SELECT nextval('decisions_log_seq_seq')")) == 1


async def test_triggers_and_foreign_keys_are_on_again_after_a_reset(database: Database) -> None:
    await fill(database)
    await reset_postgres(database)
    await fill(database)  # the pool's list-versions trigger ran: the tenant's list version moved
    async with database.engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM compute_list_versions")) == 1
        with pytest.raises(Exception, match="foreign key"):
            await conn.execute(
                text("INSERT INTO compute_sites VALUES ('s2', 'nobody', 'x', 'cloud', NULL, now(), now())")
            )
