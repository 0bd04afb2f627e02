"""Rotating the server secret through the public doors, as docs/operations.md tells it: a new
BC_SECRET with the old one in BC_PREVIOUS_SECRETS, `better-compute secrets reseal` (or
POST /v1/secrets/reseal for a tenant's own), then the old secret is dropped."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from ops_world import SECRET, Seeded, point_the_cli_at, seeded
from typer.testing import CliRunner

from better_compute.api import create_app
from better_compute.cli.main import app
from better_compute.core.errors import ComputeError
from better_compute.server import better_compute
from better_compute.store import Database

NEW_SECRET = "the-rotated-operator-secret-of-32-chars-or-more"

runner = CliRunner()


@pytest.fixture
def world(database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    point_the_cli_at(monkeypatch, database_url)
    monkeypatch.delenv("BC_PREVIOUS_SECRETS", raising=False)
    return asyncio.run(seeded(database_url))


def invoke(*args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.output


async def resolve(url: str, reference: str, tenant_id: str) -> str:
    compute = better_compute(database=url, secret=NEW_SECRET)
    try:
        return await compute.secrets.resolve(reference, tenant_id=tenant_id)
    finally:
        await compute.close()


def test_the_cli_rotates_the_server_secret(world: Seeded, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    code, reference = invoke("secrets", "create", input="dop_v1_rotated-canary-value\n")
    assert code == 0
    reference = reference.strip()

    monkeypatch.setenv("BC_SECRET", NEW_SECRET)
    code, output = invoke("secrets", "reseal")
    assert code == 1 and f"cannot open {reference}" in output  # the old secret is not given yet

    monkeypatch.setenv("BC_PREVIOUS_SECRETS", SECRET)
    code, output = invoke("secrets", "reseal", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert (report["resealed"], report["current"], report["unreadable"]) == (1, 0, [])
    code, output = invoke("secrets", "reseal")
    assert (code, output.strip()) == (0, f"resealed 0 secret(s) under key {report['keyId']}; 1 already were")

    monkeypatch.delenv("BC_PREVIOUS_SECRETS")
    assert asyncio.run(resolve(database_url, reference, world.tenant_id)) == "dop_v1_rotated-canary-value"
    assert "dop_v1_rotated-canary-value" not in output


async def test_the_http_route_reseals_the_callers_tenant(database: Database, database_url: str) -> None:
    before = better_compute(database=database_url, secret=SECRET)
    try:
        tenant = await before.iam.create_tenant("acme")
        other = await before.iam.create_tenant("globex")
        mine = await before.secrets.create(tenant.id, "acme-canary-value")
        theirs = await before.secrets.create(other.id, "globex-canary-value")
    finally:
        await before.close()

    compute = better_compute(database=database_url, secret=NEW_SECRET, previous_secrets=[SECRET])
    application = create_app(compute)
    async with application.router.lifespan_context(application):
        _, key = await compute.iam.create_api_key(tenant.id)
        transport = httpx.ASGITransport(app=application)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            first = await client.post("/v1/secrets/reseal")
            second = await client.post("/v1/secrets/reseal")
    assert first.status_code == 200, first.text
    assert {k: first.json()[k] for k in ("resealed", "current", "unreadable")} == {
        "resealed": 1,
        "current": 0,
        "unreadable": [],
    }
    assert (second.json()["resealed"], second.json()["current"]) == (0, 1)
    assert "acme-canary-value" not in first.text + second.text

    assert await resolve(database_url, mine, tenant.id) == "acme-canary-value"
    with pytest.raises(ComputeError, match="not among this server's secrets"):
        await resolve(database_url, theirs, other.id)  # another tenant's: not resealed by this key
