"""Alembic environment: always runs on a connection handed over by store.migrate."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `better-compute db upgrade` (store.migrate.upgrade)")

context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
