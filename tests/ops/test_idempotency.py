"""Idempotency-Key on POST /v1/reservations, on SQLite and PostgreSQL: a retried booking books once.

A client that never saw its answer (the connection dropped, the server answered 503 after the commit,
the caller was cancelled while its group commit ran) retries with the same key and gets the booking
that was made; the same key with another body is refused; after the retention period the key is free."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ops_world import SECRET, Seeded, seed
from sqlalchemy.util import await_only

from better_compute.api import create_app
from better_compute.compute import batch
from better_compute.core.clock import SimClock
from better_compute.ops import reservations
from better_compute.ops.idempotency import RETENTION
from better_compute.server import Compute, better_compute
from better_compute.store import Database

BOOK = {"pool": "gpu-fleet", "gpus": 1}


@dataclass
class Api:
    compute: Compute
    client: httpx.AsyncClient
    world: Seeded
    clock: SimClock

    async def book(self, key: str | None, body: dict[str, Any] = BOOK) -> httpx.Response:
        return await self.client.post("/v1/reservations", json=body, headers={"Idempotency-Key": key} if key else {})

    async def active(self) -> list[str]:
        return [r.id for r in await self.compute.reservations.list(self.world.tenant_id, state="active")]

    async def used(self) -> int:
        return sum(u.used for u in await self.compute.quotas.usage(self.world.tenant_id, "H100"))


@pytest.fixture
async def api(database: Database, database_url: str) -> AsyncIterator[Api]:
    clock = SimClock()
    compute = better_compute(database=database_url, secret=SECRET, clock=clock)
    world = await seed(compute)
    _, key = await compute.iam.create_api_key(world.tenant_id)
    transport = httpx.ASGITransport(app=create_app(compute))
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
        yield Api(compute, client, world, clock)
    await compute.close()


async def test_a_booking_retried_with_the_same_key_books_once(api: Api) -> None:
    first = await api.book("retry-1")
    assert first.status_code == 201, first.text
    again = await api.book("retry-1")  # the first answer was lost on its way: the client tries again
    assert again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    assert await api.active() == [first.json()["id"]]
    assert await api.used() == 1
    other = await api.book("retry-2")  # another key is another booking
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert len(await api.active()) == 2


async def test_the_same_key_with_another_body_is_refused_and_books_nothing(api: Api) -> None:
    first = await api.book("once")
    refused = await api.book("once", {"pool": "gpu-fleet", "gpus": 2})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["path"]) == ("CONFLICT", "/headers/Idempotency-Key")
    assert "Idempotency-Key" in error["message"]
    assert await api.active() == [first.json()["id"]]
    assert await api.used() == 1


async def test_a_key_answers_for_its_retention_period_on_the_clock_then_is_free(api: Api) -> None:
    first = (await api.book("daily")).json()["id"]
    api.clock.advance(RETENTION.total_seconds() - 1)
    assert (await api.book("daily")).json()["id"] == first
    api.clock.advance(1)
    later = await api.book("daily", {"pool": "gpu-fleet", "gpus": 2})  # a new request may reuse an expired key
    assert later.status_code == 201, later.text
    assert later.json()["id"] != first and len(await api.active()) == 2


async def test_a_key_that_is_not_visible_ascii_is_invalid_input_naming_the_header(api: Api) -> None:
    for bad in ("x" * 256, "with space", "caf\u00e9"):
        refused = await api.client.post("/v1/reservations", json=BOOK, headers={"Idempotency-Key": bad.encode("utf-8")})
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["path"] == "/headers/Idempotency-Key"
    assert await api.active() == []


async def test_a_caller_cancelled_while_its_group_commit_ran_gets_that_booking_on_retry(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch commits for a leader that is cancelled meanwhile (compute.batch): the booking stands and
    the caller saw only its cancellation. Its retry with the same key answers that booking."""
    reached, go = asyncio.Event(), asyncio.Event()
    if api.compute.db.is_postgres:
        real_write = batch._apply_in_one_call

        async def write_then_pause(*args: Any) -> None:
            await real_write(*args)
            reached.set()
            await go.wait()

        monkeypatch.setattr(batch, "_apply_in_one_call", write_then_pause)
    else:
        dialect = api.compute.db.engine.sync_engine.dialect
        real_commit = dialect.do_commit

        commits = 0

        def commit_then_pause(dbapi_connection: Any) -> None:
            nonlocal commits
            real_commit(dbapi_connection)
            commits += 1
            if commits == 2:  # the key's record commits first, then the booking
                reached.set()
                await_only(go.wait())

        monkeypatch.setattr(dialect, "do_commit", commit_then_pause)

    def book() -> Any:
        return reservations.create_reservation(
            api.compute, api.world.tenant_id, pool="gpu-fleet", gpus=1, idempotency_key="cancelled-1"
        )

    caller = asyncio.create_task(book())
    await asyncio.wait_for(reached.wait(), 60)
    caller.cancel()
    await asyncio.sleep(0)
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    booked = await api.active()
    assert len(booked) == 1, "the cancelled caller's booking committed"
    monkeypatch.undo()
    retried = await book()
    assert retried["id"] == booked[0]
    assert await api.active() == booked
    assert await api.used() == 1


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_two_replicas_booking_with_one_key_at_once_book_once(api: Api, database_url: str) -> None:
    """Two processes on one PostgreSQL: the key's primary key lets one record stand, and the booking id it
    names is booked once (the other replica's write meets it and answers it)."""
    other = better_compute(database=database_url, secret=SECRET, clock=api.clock)
    try:
        made = await asyncio.gather(
            *(
                reservations.create_reservation(
                    compute, api.world.tenant_id, pool="gpu-fleet", gpus=1, idempotency_key="both-replicas"
                )
                for compute in (api.compute, other, api.compute, other)
            )
        )
    finally:
        await other.close()
    assert len({m["id"] for m in made}) == 1
    assert await api.active() == [made[0]["id"]]
    assert await api.used() == 1
