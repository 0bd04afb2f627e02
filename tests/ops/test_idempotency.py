"""Idempotency-Key on every POST that creates (reservations, API keys, secrets), on SQLite and PostgreSQL.

A client that never saw its answer (the connection dropped, the server answered 503 after the commit,
the caller was cancelled while its commit ran) retries with the same key and gets the object that was
made (a new API key's value too); the same key with another body is refused; after the retention
period the key is free; the database keeps neither the key nor a one-time value in plain form."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ops_world import SECRET, Seeded, seed
from sqlalchemy import select, update
from sqlalchemy.util import await_only

from better_compute.api import create_app
from better_compute.compute import batch
from better_compute.core.clock import SimClock
from better_compute.ops import api_keys, reservations, secrets
from better_compute.ops.idempotency import RETENTION, IdempotencyKeyRow
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

    async def post(self, path: str, key: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return await self.client.post(path, json=body, headers={"Idempotency-Key": key})

    async def key_ids(self) -> list[str]:
        return [k.id for k in await self.compute.iam.list_api_keys(self.world.tenant_id)]

    async def secret_refs(self) -> list[str]:
        return [r.reference for r in await self.compute.secrets.list(self.world.tenant_id)]

    async def records(self) -> list[tuple[Any, ...]]:
        async with self.compute.db.session() as session:
            return [tuple(row) for row in (await session.execute(select(IdempotencyKeyRow.__table__))).all()]


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


async def test_an_api_key_created_again_with_the_same_key_answers_that_key_and_its_value(api: Api) -> None:
    before = await api.key_ids()
    first = await api.post("/v1/api-keys", "new-key-1")
    assert first.status_code == 201, first.text
    again = await api.post("/v1/api-keys", "new-key-1")  # the first answer was lost: the value with it
    assert again.status_code == 201, again.text
    assert (again.json()["id"], again.json()["key"]) == (first.json()["id"], first.json()["key"])
    assert await api.key_ids() == [*before, first.json()["id"]]
    whoami = await api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {again.json()['key']}"})
    assert whoami.json()["keyId"] == first.json()["id"]  # the value answered again is the key that was made
    other = await api.post("/v1/api-keys", "new-key-2")
    assert other.json()["id"] != first.json()["id"] and other.json()["key"] != first.json()["key"]
    assert len(await api.key_ids()) == len(before) + 2


async def test_a_secret_created_again_with_the_same_key_is_sealed_once_and_another_value_is_refused(api: Api) -> None:
    first = await api.post("/v1/secrets", "seal-1", {"value": "dop_v1_first-value"})
    assert first.status_code == 201, first.text
    again = await api.post("/v1/secrets", "seal-1", {"value": "dop_v1_first-value"})
    assert again.status_code == 201 and again.json() == first.json()
    refused = await api.post("/v1/secrets", "seal-1", {"value": "dop_v1_another-value"})
    assert refused.status_code == 409, refused.text
    assert (refused.json()["error"]["code"], refused.json()["error"]["path"]) == (
        "CONFLICT",
        "/headers/Idempotency-Key",
    )
    assert "dop_v1_another-value" not in refused.text
    assert await api.secret_refs() == [first.json()["reference"]]
    assert await api.compute.secrets.resolve(first.json()["reference"], tenant_id=api.world.tenant_id) == (
        "dop_v1_first-value"
    )


async def test_a_request_refused_for_its_body_records_nothing_so_its_key_may_be_sent_again(api: Api) -> None:
    for path, bad, good in (
        ("/v1/secrets", {"value": ""}, {"value": "dop_v1_corrected"}),
        ("/v1/reservations", {"pool": "gpu-fleet", "gpus": 0}, BOOK),
    ):
        refused = await api.post(path, "fix-and-retry", bad)
        assert refused.status_code == 400, refused.text
        made = await api.post(path, "fix-and-retry", good)
        assert made.status_code == 201, made.text
    assert len(await api.secret_refs()) == 1 and len(await api.active()) == 1


async def test_the_database_keeps_neither_the_key_nor_a_value_it_stands_for(api: Api) -> None:
    idempotency_key = "a9f3c1e2-5b7d-4e8a-9c6f-0d1e2f3a4b5c"

    async def stored() -> bytes:
        cells = [cell for row in await api.records() for cell in row]
        return b"".join(c if isinstance(c, bytes) else str(c).encode() for c in cells)

    assert (await api.book(idempotency_key)).status_code == 201
    assert idempotency_key.encode() not in await stored()  # a record is found by the key's hash
    made = (await api.post("/v1/api-keys", idempotency_key)).json()
    secret = "dop_v1_never-stored-plainly"
    await api.post("/v1/secrets", idempotency_key, {"value": secret})
    assert len(await api.records()) == 3  # one per operation: a key is scoped to its operation
    blob = await stored()
    for plain in (idempotency_key, made["key"], secret, hashlib.sha256(secret.encode()).hexdigest()):
        assert plain.encode() not in blob, plain


async def test_records_past_their_retention_are_purged_with_their_sealed_answers(api: Api) -> None:
    await api.post("/v1/api-keys", "yesterday")
    api.clock.advance(RETENTION.total_seconds())
    await api.post("/v1/api-keys", "today")
    assert len(await api.records()) == 1  # the tenant's next claim purged the expired one, sealed value and all
    replayed = await api.post("/v1/api-keys", "yesterday")
    assert replayed.status_code == 201 and len(await api.key_ids()) == 4  # the fixture's, and three made


Create = Callable[[Compute, str, str], Coroutine[Any, Any, dict[str, Any]]]


def _create_api_key(compute: Compute, tenant_id: str, key: str) -> Coroutine[Any, Any, dict[str, Any]]:
    return api_keys.create_api_key(compute, tenant_id, idempotency_key=key)


def _create_secret(compute: Compute, tenant_id: str, key: str) -> Coroutine[Any, Any, dict[str, Any]]:
    return secrets.create_secret(compute, tenant_id, "dop_v1_cancelled-caller", idempotency_key=key)


@pytest.mark.parametrize("create", [_create_api_key, _create_secret], ids=["api-key", "secret"])
async def test_a_create_whose_caller_is_cancelled_while_it_commits_is_answered_to_its_retry(
    api: Api, monkeypatch: pytest.MonkeyPatch, create: Create
) -> None:
    """The object's transaction commits; its caller is cancelled before it hears so. The retry with the
    same key answers that object (and an API key's value), and nothing is made twice."""
    reached, go = asyncio.Event(), asyncio.Event()
    dialect = api.compute.db.engine.sync_engine.dialect
    real_commit = dialect.do_commit
    commits = 0
    caller: asyncio.Task[dict[str, Any]] | None = None

    def commit_then_pause(dbapi_connection: Any) -> None:
        nonlocal commits
        real_commit(dbapi_connection)
        if asyncio.current_task() is caller:
            commits += 1
            if commits == 2:  # the key's record commits first, then the object
                reached.set()
                await_only(go.wait())

    monkeypatch.setattr(dialect, "do_commit", commit_then_pause)
    keys, refs = await api.key_ids(), await api.secret_refs()
    caller = asyncio.create_task(create(api.compute, api.world.tenant_id, "cancelled-2"))
    await asyncio.wait_for(reached.wait(), 60)
    caller.cancel()
    await asyncio.sleep(0)
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    monkeypatch.undo()
    made = [k for k in await api.key_ids() if k not in keys] + [r for r in await api.secret_refs() if r not in refs]
    assert len(made) == 1, "the cancelled caller's object committed"
    retried = await create(api.compute, api.world.tenant_id, "cancelled-2")
    assert made[0] in (retried["id"], retried.get("reference"))
    if "key" in retried:
        whoami = await api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {retried['key']}"})
        assert whoami.json()["keyId"] == made[0]
    assert len(await api.key_ids()) + len(await api.secret_refs()) == len(keys) + len(refs) + 1


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("create", [_create_api_key, _create_secret], ids=["api-key", "secret"])
async def test_two_replicas_creating_with_one_key_at_once_make_one(api: Api, database_url: str, create: Create) -> None:
    """Both replicas answer the same object (an API key with the same value); one is made."""
    before = len(await api.key_ids()) + len(await api.secret_refs())
    other = better_compute(database=database_url, secret=SECRET, clock=api.clock)
    try:
        made = await asyncio.gather(
            *(
                create(compute, api.world.tenant_id, "both-replicas")
                for compute in (api.compute, other, api.compute, other)
            )
        )
    finally:
        await other.close()
    assert len({json.dumps(m, sort_keys=True) for m in made}) == 1
    assert len(await api.key_ids()) + len(await api.secret_refs()) == before + 1


async def test_a_sealed_answer_that_does_not_open_is_a_clean_refusal_naming_the_header(api: Api) -> None:
    """A record altered in the database (or a key that does not derive its sealing key) never answers a
    value: the retry is refused, naming the header, with no traceback and nothing made."""
    first = await api.post("/v1/api-keys", "tampered")
    async with api.compute.db.transaction() as session:
        await session.execute(update(IdempotencyKeyRow).values(sealed_answer=b"\0" * 40))
    refused = await api.post("/v1/api-keys", "tampered")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["path"] == "/headers/Idempotency-Key"
    assert first.json()["key"] not in refused.text
    assert len(await api.key_ids()) == 2
