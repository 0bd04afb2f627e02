"""Sealed secrets: tenant-bound, never in plain form in the database or the logs."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import func, select, text

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.core.redaction import RedactingFilter
from better_compute.iam import Iam
from better_compute.secrets import Sealer, SecretRow, Secrets, is_reference, parse_reference
from better_compute.store import Database

SERVER_SECRET = "s" * 40


async def dump_database(db: Database) -> str:
    """Every row of every table, rendered as text (bytes both raw and decoded), for canary scans."""
    if db.is_postgres:
        query = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    else:
        query = "SELECT name FROM sqlite_master WHERE type = 'table'"
    parts: list[str] = []
    async with db.engine.connect() as conn:
        tables = [r[0] for r in await conn.execute(text(query))]
        assert "iam_secrets" in tables
        for table in tables:
            for row in await conn.execute(text(f'SELECT * FROM "{table}"')):
                for value in row:
                    if isinstance(value, bytes | memoryview):
                        parts.append(bytes(value).decode("latin-1"))
                    parts.append(str(value))
    return "\n".join(parts)


async def test_a_tenant_resolves_its_own_secret(database: Database, clock: SimClock) -> None:
    tenant = await Iam(database, clock).create_tenant("acme")
    secrets = Secrets(database, clock, SERVER_SECRET)
    reference = await secrets.create(tenant.id, "dop_v1_token-value")
    assert reference.startswith(f"secret://{tenant.id}/sec_")
    assert is_reference(reference)
    assert parse_reference(reference) == (tenant.id, reference.rsplit("/", 1)[1])
    assert await secrets.resolve(reference, tenant_id=tenant.id) == "dop_v1_token-value"


async def test_one_tenant_cannot_read_another_tenants_secret(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    a, b = await iam.create_tenant("a"), await iam.create_tenant("b")
    secrets = Secrets(database, clock, SERVER_SECRET)
    reference = await secrets.create(a.id, "a-private-value")
    secret_id = parse_reference(reference)[1]
    for attempt in [reference, f"secret://{b.id}/{secret_id}"]:
        with pytest.raises(ComputeError) as err:
            await secrets.resolve(attempt, tenant_id=b.id)
        assert err.value.code == "NOT_FOUND"
        assert "a-private-value" not in str(err.value)
    with pytest.raises(ComputeError):
        await secrets.delete(b.id, reference)
    assert await secrets.resolve(reference, tenant_id=a.id) == "a-private-value"


async def test_a_sealed_row_moved_to_another_tenant_does_not_open(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    a, b = await iam.create_tenant("a"), await iam.create_tenant("b")
    secrets = Secrets(database, clock, SERVER_SECRET)
    reference = await secrets.create(a.id, "a-private-value")
    secret_id = parse_reference(reference)[1]
    async with database.transaction() as session:
        row = await session.get(SecretRow, secret_id)
        assert row is not None
        row.tenant_id = b.id
    with pytest.raises(ComputeError) as err:
        await secrets.resolve(f"secret://{b.id}/{secret_id}", tenant_id=b.id)
    assert err.value.code == "INVALID_STATE"


async def test_another_server_secret_does_not_open_it(database: Database, clock: SimClock) -> None:
    tenant = await Iam(database, clock).create_tenant("acme")
    reference = await Secrets(database, clock, SERVER_SECRET).create(tenant.id, "value-123456")
    with pytest.raises(ComputeError) as err:
        await Secrets(database, clock, "t" * 40).resolve(reference, tenant_id=tenant.id)
    assert err.value.code == "INVALID_STATE"


async def test_a_canary_never_appears_in_the_database_or_the_logs(
    database: Database, clock: SimClock, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "CANARY-7f3a9c1e-secret-value"
    caplog.handler.addFilter(RedactingFilter())
    caplog.set_level(logging.DEBUG)
    tenant = await Iam(database, clock).create_tenant("acme")
    secrets = Secrets(database, clock, SERVER_SECRET)
    reference = await secrets.create(tenant.id, canary)
    value = await secrets.resolve(reference, tenant_id=tenant.id)
    logging.getLogger("better_compute.test").info("resolved %s for tenant %s", value, tenant.id)
    logging.getLogger("better_compute.test").warning("token=%s", value)
    dumped = await dump_database(database)
    assert reference.rsplit("/", 1)[1] in dumped  # the dump did see the secrets table
    assert canary not in dumped
    assert canary.encode().hex() not in dumped
    assert f"resolved [REDACTED] for tenant {tenant.id}" in caplog.text  # captured, with the value taken out
    assert canary not in caplog.text


async def test_malformed_references_and_bad_values_change_nothing(database: Database, clock: SimClock) -> None:
    tenant = await Iam(database, clock).create_tenant("acme")
    secrets = Secrets(database, clock, SERVER_SECRET)
    for bad in ["plain-token-value", "secret://", f"secret://{tenant.id}", f"secret://{tenant.id}/a/b", "http://x/y"]:
        with pytest.raises(ComputeError) as err:
            await secrets.resolve(bad, tenant_id=tenant.id, path="/providerAccounts/0/config/token")
        assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/providerAccounts/0/config/token")
        assert "plain-token-value" not in str(err.value)
    for value in ["", f"secret://{tenant.id}/sec_x"]:
        with pytest.raises(ComputeError) as err:
            await secrets.create(tenant.id, value)
        assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/value")
    with pytest.raises(ComputeError) as err:
        await secrets.create("ten_unknown", "some-value")
    assert (err.value.code, err.value.path) == ("NOT_FOUND", "/tenantId")
    async with database.session() as session:
        assert await session.scalar(select(func.count()).select_from(SecretRow)) == 0


def test_a_short_server_secret_is_refused() -> None:
    with pytest.raises(ComputeError) as err:
        Sealer("too-short")
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/secret")
