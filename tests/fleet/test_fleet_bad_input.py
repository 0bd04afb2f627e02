"""Bad input never breaks a tenant: each case found by hostile testing (issue 11) is refused with INVALID_INPUT at
its JSON pointer, writes nothing, and the tenant plans afterwards, on SQLite and PostgreSQL, through the Python
API, HTTP and the CLI alike."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from fleet_documents import edit, example
from fleet_store import Harness, harness
from fleet_stub import stub_providers
from sqlalchemy import text
from typer.testing import CliRunner

from better_compute.api.app import create_app
from better_compute.cli.fleet import EXIT_ERROR, fleet_app
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet import fleet_module
from better_compute.fleet import service as fleet_service
from better_compute.server import better_compute
from better_compute.store import Database
from better_compute.vps import vps

CONFIG = "/providerAccounts/0/config"
BAD_VALUES: list[tuple[str, Any, str]] = [
    ("surrogate", {"note": "\ud800"}, f"{CONFIG}/note"),
    ("nan", {"weight": float("nan")}, f"{CONFIG}/weight"),
    ("infinity", {"weight": float("inf")}, f"{CONFIG}/weight"),
    ("nul", {"note": "a\x00b"}, f"{CONFIG}/note"),
]


@pytest.fixture
async def h(database: Database, clock: SimClock) -> Harness:
    return await harness(database, clock)


async def _refused(h: Harness, document: Any) -> ComputeError:
    before = await h.snapshot_rows()
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(document, tenant_id=h.tenant_id)
    assert await h.snapshot_rows() == before, "a refused apply wrote something"
    assert caught.value.code is ErrorCode.INVALID_INPUT
    return caught.value


async def test_a_config_value_no_database_can_hold_is_refused_and_the_tenant_still_plans(h: Harness) -> None:
    document = example("gke", tenant_id=h.tenant_id)
    for case, config, where in BAD_VALUES:
        bad = edit(document, CONFIG, {**document["providerAccounts"][0]["config"], **config})
        error = await _refused(h, bad)
        assert [p.path for p in error.problems] == [where], case
        assert (await h.fleet.plan(document, tenant_id=h.tenant_id)).has_changes, case
    await h.fleet.apply(document, tenant_id=h.tenant_id)
    assert not (await h.fleet.plan(document, tenant_id=h.tenant_id, prune=True)).has_changes


PLAINTEXT: list[tuple[dict[str, Any], str]] = [
    ({"auth": {"token": "dop_v1_plaintext"}}, f"{CONFIG}/auth/token"),
    ({"pat": "dop_v1_plaintext"}, f"{CONFIG}/pat"),
    ({"doTokenValue": "dop_v1_plaintext"}, f"{CONFIG}/doTokenValue"),
    ({"tokens": ["secret://ten_x/sec_1", "dop_v1_plaintext"]}, f"{CONFIG}/tokens/1"),
]


async def test_a_plaintext_secret_anywhere_in_a_config_is_refused(h: Harness) -> None:
    """Providers without a config model (the stubs here): any value under a secret-looking key, at any depth."""
    document = example("gke", tenant_id=h.tenant_id)
    for config, where in PLAINTEXT:
        bad = edit(document, CONFIG, {**document["providerAccounts"][0]["config"], **config})
        error = await _refused(h, bad)
        assert where in {p.path for p in error.problems}, (where, error.problems)
        assert "dop_v1_plaintext" not in json.dumps(error.to_dict())


async def test_apply_stores_the_fingerprint_the_next_plan_reads(h: Harness) -> None:
    document = example("gke", tenant_id=h.tenant_id)
    await h.fleet.apply(document, tenant_id=h.tenant_id)
    async with h.db.session() as session:
        stored = (
            await session.execute(text("SELECT fingerprint FROM fleet_states WHERE tenant_id = :t"), {"t": h.tenant_id})
        ).scalar_one()
    assert stored == (await h.fleet.plan(document, tenant_id=h.tenant_id)).fingerprint


async def test_a_state_the_next_plan_cannot_read_rolls_the_whole_apply_back(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = []
    real = fleet_service.read_snapshot

    async def unreadable_after_the_write(session: Any, tenant_id: str) -> Any:
        reads.append(tenant_id)
        if len(reads) == 2:  # the read-back after the writes
            raise ValueError("this state cannot be read back")
        return await real(session, tenant_id)

    monkeypatch.setattr(fleet_service, "read_snapshot", unreadable_after_the_write)
    before = await h.snapshot_rows()
    with pytest.raises(ValueError, match="read back"):
        await h.fleet.apply(example("gke", tenant_id=h.tenant_id), tenant_id=h.tenant_id)
    assert await h.snapshot_rows() == before


@pytest.fixture
async def client(database: Database) -> AsyncIterator[httpx.AsyncClient]:
    compute = better_compute(
        database=database.url,
        secret="s" * 40,
        modules=[vps(providers=list(stub_providers().values())), fleet_module()],
        clock=SimClock(),
    )
    tenant = await compute.iam.create_tenant("bad-input")
    _, key = await compute.iam.create_api_key(tenant.id)
    transport = httpx.ASGITransport(app=create_app(compute))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers={"Authorization": f"Bearer {key}"}
    ) as http:
        http.headers["X-Tenant"] = tenant.id
        yield http
    await compute.close()


def _body(document: Any) -> bytes:
    return json.dumps({"document": document}).encode()


def _gke_with(client: httpx.AsyncClient, raw_value: str) -> bytes:
    """A plan body whose account config holds `raw_value` spelled as raw JSON (NaN, "\\ud800", a long int)."""
    document = example("gke", tenant_id=client.headers["X-Tenant"])
    document["providerAccounts"][0]["config"]["note"] = "@@"
    return _body(document).replace(b'"@@"', raw_value.encode())


HTTP_CASES: list[tuple[str, str | None]] = [
    ('"\\ud800"', f"/document{CONFIG}/note"),
    ("NaN", f"/document{CONFIG}/note"),
    ("Infinity", f"/document{CONFIG}/note"),
    ('"a\\u0000b"', f"/document{CONFIG}/note"),
    ("9" * 4301, f"/document{CONFIG}/note"),
    ("[" * 2000 + "]" * 2000, None),
]


async def test_http_answers_400_for_each_bad_value_and_commits_nothing(client: httpx.AsyncClient) -> None:
    for raw_value, where in HTTP_CASES:
        for route in ("/v1/fleet/apply", "/v1/fleet/plan"):
            answer = await client.post(route, content=_gke_with(client, raw_value))
            assert answer.status_code == 400, (raw_value[:20], answer.text)
            error = answer.json()["error"]
            assert error["code"] == "INVALID_INPUT"
            if where is not None:
                assert [p["path"] for p in error["problems"]] == [where]
            assert len(answer.content) < 1000
    document = example("gke", tenant_id=client.headers["X-Tenant"])
    planned = await client.post("/v1/fleet/plan", json={"document": document})
    assert planned.status_code == 200 and planned.json()["summary"]["create"] == 3


async def test_http_non_utf8_and_oversized_bodies_are_refused(client: httpx.AsyncClient) -> None:
    for raw in (b'{"document": "\xff"}', json.dumps({"document": 1}).encode("utf-16")):
        answer = await client.post("/v1/fleet/plan", content=raw)
        assert answer.status_code == 400
        assert "not UTF-8" in answer.json()["error"]["message"]
    big = await client.post("/v1/fleet/plan", content=b'{"document": "' + b"x" * (9 * 1024 * 1024) + b'"}')
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "INVALID_INPUT"


async def test_a_huge_field_gets_a_short_answer(client: httpx.AsyncClient) -> None:
    document = example("gke", tenant_id=client.headers["X-Tenant"])
    document["sites"][0]["region"] = "x" * 60_000
    document["pools"][0]["site"] = "y" * 60_000
    document["pools"][0]["policy"]["substrate"]["account"] = "z" * 60_000
    answer = await client.post("/v1/fleet/plan", json={"document": document})
    assert answer.status_code == 400
    assert len(answer.content) < 2000


cli = typer.Typer()
cli.add_typer(fleet_app, name="fleet")


BAD_FILES: dict[str, bytes] = {
    "utf-16": json.dumps({"version": 1}).encode("utf-16"),
    "not-utf-8": b'{"version": 1, "sites": ["\xff\xfe"]}',
    "huge-int": b'{"version": ' + b"9" * 4301 + b"}",
    "deep": b"[" * 5000 + b"]" * 5000,
    "surrogate": b'{"version": 1, "providerAccounts": [{"name": "a", "provider": "gcp", "config": {"x": "\\ud800"}}]}',
    "surrogate-key": b'{"version": 1, "providerAccounts": [{"name": "a", "provider": "gcp", "config": {"\\ud800": 1}}]}',
}


def test_the_cli_refuses_bad_bytes_in_one_line_without_a_traceback(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_TEST_DATABASE", database_url)
    monkeypatch.setenv("BC_APP", "fleet_cli_app:build")
    monkeypatch.setenv("BC_TENANT", "ten_nobody")
    for case, raw in BAD_FILES.items():
        path = tmp_path / f"{case}.json"
        path.write_bytes(raw)
        result = CliRunner().invoke(cli, ["fleet", "plan", str(path)])
        assert result.exit_code == EXIT_ERROR, (case, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (case, result.exception)
        assert "Traceback" not in result.output, case
        assert "INVALID_INPUT" in result.stderr, (case, result.stderr)
