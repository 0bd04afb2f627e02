"""Tenants and API keys: hashed at rest, checked in constant time, bad input changes nothing."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from sqlalchemy import event, func, select, text

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.iam import ApiKeyRow, Iam, Principal, TenantRow
from better_compute.store import Database


async def _count(db: Database, table: type[TenantRow] | type[ApiKeyRow]) -> int:
    async with db.session() as session:
        return int(await session.scalar(select(func.count()).select_from(table)) or 0)


async def test_an_api_key_authenticates_as_its_tenant(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    tenant = await iam.create_tenant("acme")
    key, plain = await iam.create_api_key(tenant.id)
    assert await iam.authenticate(plain) == Principal(tenant_id=tenant.id, key_id=key.id)
    assert (await iam.get_tenant(tenant.id)).name == "acme"


async def test_keys_are_stored_only_as_hashes(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    tenant = await iam.create_tenant("acme")
    _, plain = await iam.create_api_key(tenant.id)
    async with database.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT * FROM iam_api_keys"))).all()
    dumped = repr(rows)
    assert plain not in dumped
    assert plain[-43:] not in dumped  # the secret part (which may itself hold '_')
    assert hashlib.sha256(plain.encode()).hexdigest() in dumped


async def test_wrong_revoked_and_malformed_keys_are_denied(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    tenant = await iam.create_tenant("acme")
    key, plain = await iam.create_api_key(tenant.id)
    forged = plain[:-1] + ("A" if plain[-1] != "A" else "B")
    for bad in [forged, "", "bck_nope", plain + "x", "Bearer " + plain]:
        with pytest.raises(ComputeError) as err:
            await iam.authenticate(bad)
        assert err.value.code == "PERMISSION_DENIED"
        assert plain not in str(err.value)
    await iam.revoke_api_key(tenant.id, key.id)
    with pytest.raises(ComputeError) as err:
        await iam.authenticate(plain)
    assert err.value.code == "PERMISSION_DENIED"


async def test_one_tenant_cannot_revoke_another_tenants_key(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    a, b = await iam.create_tenant("a"), await iam.create_tenant("b")
    key, plain = await iam.create_api_key(a.id)
    with pytest.raises(ComputeError) as err:
        await iam.revoke_api_key(b.id, key.id)
    assert err.value.code == "NOT_FOUND"
    assert (await iam.authenticate(plain)).tenant_id == a.id


async def test_bad_input_is_refused_and_changes_nothing(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    await iam.create_tenant("acme")
    before = (await _count(database, TenantRow), await _count(database, ApiKeyRow))
    with pytest.raises(ComputeError) as err:
        await iam.create_api_key("ten_unknown")
    assert (err.value.code, err.value.path) == ("NOT_FOUND", "/tenantId")
    assert "ten_unknown" in err.value.message
    with pytest.raises(ComputeError) as err:
        await iam.create_tenant("acme")
    assert (err.value.code, err.value.path) == ("CONFLICT", "/name")
    for name in ["", "Has Spaces", "-leading", "x" * 64]:
        with pytest.raises(ComputeError) as err:
            await iam.create_tenant(name)
        assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/name")
    with pytest.raises(ComputeError) as err:
        await iam.get_tenant("ten_unknown")
    assert err.value.code == "NOT_FOUND"
    assert (await _count(database, TenantRow), await _count(database, ApiKeyRow)) == before


class _Statements:
    """Counts the statements a database's engine sends."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        event.listen(db.engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: object) -> None:
        self.count += 1


async def test_a_verified_key_is_checked_without_the_database_until_a_revoke_on_any_replica(
    database: Database, database_url: str, clock: SimClock
) -> None:
    """On PostgreSQL two replicas (two Iams on two engines): the one that verified the key answers it from
    memory, and a revoke on the other reaches it by NOTIFY before the key works again. On SQLite, one
    process: its own revoke ends the key at once."""
    replica = Database(database_url) if database.is_postgres else database
    here, there = Iam(database, clock), Iam(replica, clock)
    await here.start()
    await there.start()
    try:
        tenant = await here.create_tenant("acme")
        key, plain = await here.create_api_key(tenant.id)
        for _ in range(200):  # the listener is up once its connection is
            if there.verified.get("") is None and (there.verified._listening or not database.is_postgres):
                break
            await asyncio.sleep(0.01)
        sent = _Statements(replica)
        assert await there.authenticate(plain) == Principal(tenant_id=tenant.id, key_id=key.id)
        read = sent.count
        assert read >= 1
        for _ in range(5):
            await there.authenticate(plain)
        assert sent.count == read, "a verified key costs no round trip"
        await here.revoke_api_key(tenant.id, key.id)
        async with asyncio.timeout(10):
            while True:
                try:
                    await there.authenticate(plain)
                except ComputeError as exc:
                    assert exc.code == "PERMISSION_DENIED"
                    break
                await asyncio.sleep(0.005)
        with pytest.raises(ComputeError):
            await here.authenticate(plain)
    finally:
        await there.close()
        await here.close()
        if replica is not database:
            await replica.dispose()


async def test_without_its_revoke_listener_a_postgresql_replica_reads_every_key(
    database: Database, clock: SimClock
) -> None:
    iam = Iam(database, clock)  # not started: it could miss another replica's revoke, so it caches nothing
    tenant = await iam.create_tenant("acme")
    _, plain = await iam.create_api_key(tenant.id)
    sent = _Statements(database)
    await iam.authenticate(plain)
    first = sent.count
    await iam.authenticate(plain)
    assert sent.count == (first if not database.is_postgres else 2 * first)
