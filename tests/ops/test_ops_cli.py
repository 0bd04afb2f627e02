"""The operator's commands on SQLite and PostgreSQL: every list as a table and as --json, values never shown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from ops_world import SECRET, Seeded, point_the_cli_at, seeded
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.store import Database

runner = CliRunner()


@pytest.fixture
def world(database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    point_the_cli_at(monkeypatch, database_url)
    return asyncio.run(seeded(database_url))


def ok(*args: str, input: str | None = None) -> str:
    result = runner.invoke(app, list(args), input=input)
    assert result.exit_code == 0, result.output
    return result.stdout


def as_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json"))


def test_tenants_list_shows_every_tenant_by_id_and_name(world: Seeded) -> None:
    ok("tenants", "create", "globex")
    table = ok("tenants", "list")
    assert "acme" in table and "globex" in table and world.tenant_id in table
    assert [t["name"] for t in as_json("tenants", "list")] == ["acme", "globex"]


def test_an_api_key_value_is_shown_once_then_listed_and_revoked_by_id(world: Seeded) -> None:
    created = as_json("api-keys", "create")
    assert created["key"].startswith("bck_")
    listing = ok("api-keys", "list") + ok("api-keys", "list", "--json")
    assert created["id"] in listing and created["key"] not in listing
    revoked = as_json("api-keys", "revoke", created["id"])
    assert revoked["revokedAt"] is not None
    assert as_json("api-keys", "list")[0]["revokedAt"] == revoked["revokedAt"]


def test_a_secret_from_stdin_or_a_file_prints_its_reference_and_never_its_value(world: Seeded, tmp_path: Path) -> None:
    value = "dop_v1_canary-secret-value-0123456789"
    reference = ok("secrets", "create", input=value + "\n").strip()
    assert reference.startswith(f"secret://{world.tenant_id}/sec_")
    (tmp_path / "token").write_text("another-canary-value-9876543210")
    from_file = as_json("secrets", "create", "--from-file", str(tmp_path / "token"))
    outputs = [
        reference,
        json.dumps(from_file),
        ok("secrets", "list"),
        ok("secrets", "list", "--json"),
        runner.invoke(app, ["secrets", "delete", "secret://someone/else"]).output,
    ]
    assert all(value not in o and "another-canary" not in o for o in outputs)
    assert [s["reference"] for s in as_json("secrets", "list")] == [reference, from_file["reference"]]

    async def opened() -> str:
        from better_compute.server import better_compute

        compute = better_compute(database=world_url(), secret=SECRET)
        try:
            return await compute.secrets.resolve(reference, tenant_id=world.tenant_id)
        finally:
            await compute.close()

    assert asyncio.run(opened()) == value  # the one trailing newline of `echo` is not part of it
    assert ok("secrets", "delete", reference).strip() == f"deleted {reference}"
    assert [s["id"] for s in as_json("secrets", "list")] == [from_file["id"]]
    missing = runner.invoke(app, ["secrets", "delete", reference])
    assert missing.exit_code == 1 and "NOT_FOUND" in missing.stderr


def world_url() -> str:
    import os

    return os.environ["BC_DATABASE_URL"]


def test_pools_list_and_get_count_nodes(world: Seeded) -> None:
    assert "gpu-fleet" in ok("pools", "list")
    (pool,) = as_json("pools", "list")
    assert (pool["name"], pool["nodes"], pool["readyNodes"], pool["connectedNodes"]) == ("gpu-fleet", 2, 2, 1)
    assert as_json("pools", "get", "gpu-fleet")["policy"] == {"kubernetes": {}}
    missing = runner.invoke(app, ["pools", "get", "nope"])
    assert missing.exit_code == 1 and missing.stderr.startswith("error: NOT_FOUND")


def test_nodes_list_shows_connected_state_and_labels_per_pool(world: Seeded) -> None:
    table = ok("nodes", "list", "--pool", "gpu-fleet")
    assert "node-a" in table and "zone=tor1-a" in table
    nodes = {n["name"]: n for n in as_json("nodes", "list", "--pool", "gpu-fleet")}
    assert nodes["node-a"]["connected"] is True and nodes["node-b"]["connected"] is False
    assert {n["state"] for n in nodes.values()} == {"ready"}
    assert nodes["node-a"]["labels"] == {"zone": "tor1-a"} and nodes["node-a"]["gpus"] == 2


def test_reservations_are_created_listed_and_released(world: Seeded) -> None:
    made = as_json("reservations", "create", "--pool", "gpu-fleet", "--gpus", "2")
    assert (made["pool"], made["gpuCount"], made["state"]) == ("gpu-fleet", 2, "active")
    assert [r["id"] for r in as_json("reservations", "list", "--state", "active")] == [made["id"]]
    assert as_json("reservations", "release", made["id"])["state"] == "released"
    assert as_json("reservations", "list", "--state", "active") == []
    assert "No reservations." in ok("reservations", "list", "--pool", "gpu-fleet", "--state", "active")


def test_a_reservation_created_again_with_the_same_idempotency_key_books_once(world: Seeded) -> None:
    create = ("reservations", "create", "--pool", "gpu-fleet", "--idempotency-key", "job-42")
    made = as_json(*create)
    assert as_json(*create)["id"] == made["id"]  # run again after a lost answer: the same booking
    refused = runner.invoke(app, ["reservations", "create", "--pool", "gpu-fleet", "--gpus", "2", *create[4:]])
    assert refused.exit_code != 0 and "CONFLICT" in refused.stderr and "Idempotency-Key" in refused.stderr
    assert as_json("reservations", "create", "--pool", "gpu-fleet")["id"] != made["id"]  # no key: a new one each run
    assert len(as_json("reservations", "list", "--state", "active")) == 2


def test_an_api_key_created_again_with_the_same_idempotency_key_prints_that_key(world: Seeded) -> None:
    create = ("api-keys", "create", "--idempotency-key", "onboard-7")
    made = ok(*create).strip()
    assert made.startswith("bck_") and ok(*create).strip() == made  # run again after a lost answer: that key
    assert as_json(*create)["key"] == made
    assert ok("api-keys", "create").strip() != made  # no key: a new one each run
    assert len(as_json("api-keys", "list")) == 2


def test_a_secret_created_again_with_the_same_idempotency_key_is_sealed_once(world: Seeded) -> None:
    create = ("secrets", "create", "--idempotency-key", "seal-9")
    reference = ok(*create, input="dop_v1_cli-value\n").strip()
    assert ok(*create, input="dop_v1_cli-value\n").strip() == reference
    refused = runner.invoke(app, list(create), input="dop_v1_other-value\n")
    assert refused.exit_code != 0 and "CONFLICT" in refused.stderr and "Idempotency-Key" in refused.stderr
    assert "dop_v1_other-value" not in refused.output
    assert ok("secrets", "create", input="dop_v1_cli-value\n").strip() != reference  # no key: a new one
    assert len(as_json("secrets", "list")) == 2


def test_join_tokens_are_listed_without_values_and_revoked(world: Seeded) -> None:
    listing = ok("join-tokens", "list") + ok("join-tokens", "list", "--json")
    assert world.token_id in listing and world.token_value not in listing
    (token,) = as_json("join-tokens", "list", "--pool", "gpu-fleet")
    assert (token["usesAllowed"], token["usesLeft"], token["revokedAt"]) == (3, 3, None)
    revoked = as_json("join-tokens", "revoke", world.token_id)
    assert revoked["usesLeft"] == 0 and revoked["revokedAt"] is not None


def test_the_tenant_may_be_named_by_id_or_name(world: Seeded) -> None:
    assert as_json("pools", "list", "--tenant", world.tenant_id) == as_json("pools", "list", "--tenant", "acme")
