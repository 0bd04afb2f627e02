"""The PostgreSQL half of the `database` fixture: each test starts on empty tables (tests/conftest.py)."""

from __future__ import annotations

from sqlalchemy import text

from better_compute.store import Database

_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename != 'alembic_version'"
_RESTART_SEQUENCES = (
    "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, start_value, false) "
    "FROM pg_sequences WHERE schemaname = 'public' AND last_value IS NOT NULL"
)


async def reset_postgres(db: Database) -> None:
    """Empty every table and restart every sequence, as `TRUNCATE ... RESTART IDENTITY` would.

    Rows are DELETEd from the tables that have any, with triggers and foreign keys off for the
    transaction (session_replication_role): TRUNCATE makes new files for all 26 tables and their
    indexes, about 0.5 s a test; this is about 0.03 s. A user who may not set that role (it needs
    a superuser) gets the TRUNCATE."""
    async with db.engine.begin() as conn:
        tables = [r[0] for r in await conn.execute(text(_TABLES))]
        if not tables:
            return
        superuser = await conn.scalar(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))
        if not superuser:
            await conn.execute(text("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " RESTART IDENTITY CASCADE"))
            return
        await conn.execute(text("SET LOCAL session_replication_role = replica"))
        filled = " UNION ALL ".join(f"SELECT '{t}' WHERE EXISTS (SELECT 1 FROM \"{t}\")" for t in tables)
        for table in [r[0] for r in await conn.execute(text(filled))]:
            await conn.execute(text(f'DELETE FROM "{table}"'))
        await conn.execute(text(_RESTART_SEQUENCES))
