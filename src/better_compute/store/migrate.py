"""Alembic, run from code. The migrations are the only source of the schema.

Every module keeps its migrations as its own Alembic branch in
`store/migrations/versions` (`branch_labels=("<module>",)`, `depends_on` for
cross-module foreign keys); `upgrade` takes every branch to its head.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from better_compute.store.db import Database

__all__ = ["alembic_config", "upgrade"]

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    config.set_main_option("version_locations", str(MIGRATIONS / "versions"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


async def upgrade(database: Database) -> None:
    async with database.engine.begin() as connection:
        await connection.run_sync(_upgrade, database.url)


def _upgrade(sync_connection: object, url: str) -> None:
    config = alembic_config(url)
    config.attributes["connection"] = sync_connection
    command.upgrade(config, "heads")
