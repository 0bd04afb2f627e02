"""A provider account's lookup and a secret's resolve, which every substrate and cluster run makes, are one
statement each: a read with no BEGIN (store.Database.read), not a transaction around one SELECT."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from better_compute.core.clock import SimClock
from better_compute.server import better_compute
from better_compute.vps import vps
from better_compute.vps.accounts import create_account

SECRET = "s" * 40


@pytest.mark.usefixtures("database")  # an empty, migrated database at database_url
async def test_an_account_lookup_and_a_secret_resolve_send_one_statement_each(database_url: str) -> None:
    clock = SimClock()
    compute = better_compute(database=database_url, secret=SECRET, modules=[vps(providers=[])], clock=clock)
    try:
        tenant = await compute.iam.create_tenant("acme")
        reference = await compute.secrets.create(tenant.id, "token-value")
        async with compute.db.transaction() as session:
            await create_account(
                session, now=clock.now(), tenant_id=tenant.id, name="gke", provider="gcp", config={"t": reference}
            )
        sent: list[str] = []

        def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
            sent.append(statement)

        event.listen(compute.db.engine.sync_engine, "before_cursor_execute", seen)
        try:
            account = await compute.provider_accounts.get(tenant.id, "gke")
            assert len(sent) == 1, sent
            assert await account.resolve_secret(reference) == "token-value"
            assert len(sent) == 2, sent
            assert [a.name for a in await compute.provider_accounts.list(tenant.id)] == ["gke"]
            assert len(sent) == 3, sent
        finally:
            event.remove(compute.db.engine.sync_engine, "before_cursor_execute", seen)
    finally:
        await compute.close()
