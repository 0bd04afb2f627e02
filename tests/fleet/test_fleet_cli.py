"""`better-compute fleet ...` and `pools archive` through typer's CliRunner: output and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path

import pytest
import typer
from fleet_documents import SUBSTRATE, edit, example
from typer.testing import CliRunner

from better_compute.cli.fleet import EXIT_BLOCKED, EXIT_CHANGES, EXIT_ERROR, EXIT_OK, fleet_app
from better_compute.cli.pools import pools_app
from better_compute.core.clock import SimClock
from better_compute.iam import Iam
from better_compute.secrets import Secrets
from better_compute.store import Database

cli = typer.Typer()
cli.add_typer(fleet_app, name="fleet")
cli.add_typer(pools_app, name="pools")
runner = CliRunner()


@pytest.fixture
def tenant(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLEET_TEST_DATABASE", database_url)
    monkeypatch.setenv("BC_APP", "fleet_cli_app:build")

    async def create() -> str:
        db = Database(database_url)
        try:
            return (await Iam(db, SimClock()).create_tenant(f"cli-{uuid.uuid4().hex[:8]}")).id
        finally:
            await db.dispose()

    tenant_id = asyncio.run(create())
    monkeypatch.setenv("BC_TENANT", tenant_id)
    return tenant_id


def write(tmp_path: Path, document: object, name: str = "fleet.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def test_schema_prints_the_json_schema() -> None:
    result = runner.invoke(cli, ["fleet", "schema"])
    assert result.exit_code == EXIT_OK
    assert json.loads(result.stdout)["title"] == "FleetConfig"


def test_plan_exit_codes_follow_the_plan(tenant: str, tmp_path: Path) -> None:
    document = write(tmp_path, example("gke", tenant))
    pending = runner.invoke(cli, ["fleet", "plan", document])
    assert pending.exit_code == EXIT_CHANGES, pending.output
    assert "+ pool gpu-fleet" in pending.stdout
    assert "Plan: 3 to create, 0 to update, 0 to delete, 0 blocked; 0 unchanged, 0 kept." in pending.stdout

    applied = runner.invoke(cli, ["fleet", "apply", document, "--yes"])
    assert applied.exit_code == EXIT_OK, applied.output
    assert "Applied: 3 created, 0 updated, 0 deleted (0 unchanged, 0 kept)." in applied.stdout

    clean = runner.invoke(cli, ["fleet", "plan", document])
    assert clean.exit_code == EXIT_OK
    assert "No changes: the fleet matches the document." in clean.stdout

    moved = write(
        tmp_path, edit(example("gke", tenant), f"{SUBSTRATE}/cluster/create/location", "us-east4"), "moved.json"
    )
    blocked = runner.invoke(cli, ["fleet", "plan", moved])
    assert blocked.exit_code == EXIT_BLOCKED
    assert "! pool gpu-fleet" in blocked.stdout and "create a new pool instead" in blocked.stdout


def test_plan_json_is_the_plan_as_data(tenant: str, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["fleet", "plan", write(tmp_path, example("eks", tenant)), "--json"])
    assert result.exit_code == EXIT_CHANGES
    data = json.loads(result.stdout)
    assert data["summary"]["create"] == 3 and data["tenantId"] == tenant
    assert {i["action"] for i in data["items"]} == {"create"}


def test_invalid_documents_print_one_line_per_problem(tenant: str, tmp_path: Path) -> None:
    bad = edit(edit(example("gke", tenant), "/pools/0/site", "nowhere"), f"{SUBSTRATE}/flavors/0/nodes", -1)
    result = runner.invoke(cli, ["fleet", "plan", write(tmp_path, bad)])
    assert result.exit_code == EXIT_ERROR
    assert result.stderr.splitlines() == [
        "error: INVALID_INPUT at /pools/0/policy/substrate/flavors/0/nodes: Input should be greater than or equal to 0",
        "error: INVALID_INPUT at /pools/0/site: no site named 'nowhere' in /sites",
    ]
    (tmp_path / "broken.json").write_text("{")
    broken = runner.invoke(cli, ["fleet", "plan", str(tmp_path / "broken.json")])
    assert broken.exit_code == EXIT_ERROR and "is not JSON" in broken.stderr
    missing = runner.invoke(cli, ["fleet", "plan", str(tmp_path / "nope.json")])
    assert missing.exit_code == EXIT_ERROR and "cannot read document" in missing.stderr


def token_of(tenant: str) -> str:
    """A DOKS token sealed in the database under the CLI app's server secret."""

    async def create() -> str:
        db = Database(os.environ["FLEET_TEST_DATABASE"])
        try:
            return await Secrets(db, SimClock(), "c" * 40).create(tenant, "dop_v1_" + "b" * 40)
        finally:
            await db.dispose()

    return asyncio.run(create())


def test_apply_asks_first_and_a_no_changes_nothing(tenant: str, tmp_path: Path) -> None:
    document = write(tmp_path, example("doks", tenant, token=token_of(tenant)))
    declined = runner.invoke(cli, ["fleet", "apply", document], input="n\n")
    assert declined.exit_code == EXIT_ERROR
    assert "Apply cancelled: nothing was changed." in declined.stdout
    assert runner.invoke(cli, ["fleet", "plan", document]).exit_code == EXIT_CHANGES
    accepted = runner.invoke(cli, ["fleet", "apply", document], input="y\n")
    assert accepted.exit_code == EXIT_OK, accepted.output
    assert runner.invoke(cli, ["fleet", "plan", document]).exit_code == EXIT_OK
    again = runner.invoke(cli, ["fleet", "apply", document])
    assert again.exit_code == EXIT_OK and "Nothing to apply." in again.stdout


def test_apply_refuses_a_blocked_plan(tenant: str, tmp_path: Path) -> None:
    assert runner.invoke(cli, ["fleet", "apply", write(tmp_path, example("gke", tenant)), "--yes"]).exit_code == 0
    moved = edit(example("gke", tenant), f"{SUBSTRATE}/cluster/create/privateNodes", True)
    result = runner.invoke(cli, ["fleet", "apply", write(tmp_path, moved, "moved.json"), "--yes"])
    assert result.exit_code == EXIT_ERROR
    assert "error: INVALID_STATE at /pools/0: policy.substrate.cluster.create.privateNodes changes" in result.stderr


def test_a_saved_plan_applies_once_and_a_stale_one_is_refused(tenant: str, tmp_path: Path) -> None:
    document = write(tmp_path, example("gke", tenant))
    saved = str(tmp_path / "plan.json")
    planned = runner.invoke(cli, ["fleet", "plan", document, "--out", saved])
    assert planned.exit_code == EXIT_CHANGES and "Saved the plan to" in planned.stdout
    first = runner.invoke(cli, ["fleet", "apply", "--plan-file", saved, "--yes"])
    assert first.exit_code == EXIT_OK, first.output
    stale = runner.invoke(cli, ["fleet", "apply", "--plan-file", saved, "--yes"])
    assert stale.exit_code == EXIT_ERROR
    assert "error: CONFLICT at /plan/fingerprint: the state has moved" in stale.stderr


def test_prune_through_the_cli_and_pools_archive(tenant: str, tmp_path: Path) -> None:
    two = example("gke", tenant)
    second = json.loads(json.dumps(two["pools"][0]))
    second["name"] = "second"
    two["pools"].append(second)
    assert runner.invoke(cli, ["fleet", "apply", write(tmp_path, two, "two.json"), "--yes"]).exit_code == EXIT_OK
    one = write(tmp_path, example("gke", tenant))
    kept = runner.invoke(cli, ["fleet", "plan", one])
    assert kept.exit_code == EXIT_OK and "= pool second" in kept.stdout
    pruning = runner.invoke(cli, ["fleet", "plan", one, "--prune"])
    assert pruning.exit_code == EXIT_CHANGES and "- pool second  (substrate: teardown)" in pruning.stdout
    archived = runner.invoke(cli, ["pools", "archive", "gpu-fleet"])
    assert archived.exit_code == EXIT_OK, archived.output
    assert re.search(r"pool gpu-fleet \(pool_\w+\) is archiving", archived.stdout), archived.stdout
    missing = runner.invoke(cli, ["pools", "archive", "nope"])
    assert missing.exit_code == EXIT_ERROR and "error: NOT_FOUND at /name" in missing.stderr


def test_the_documented_example_compute_plans_the_gke_example(tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    monkeypatch.setenv("BC_SECRET", "e" * 40)
    monkeypatch.setenv("BC_DATABASE_URL", os.environ["FLEET_TEST_DATABASE"])
    result = runner.invoke(cli, ["fleet", "plan", "examples/fleet-gke.json", "--app", "examples.compute:compute"])
    assert result.exit_code == EXIT_CHANGES, result.output
    assert "+ pool gpu-fleet  (substrate: create)" in result.stdout


def test_plan_with_a_price_table_shows_the_cost_and_a_bad_table_names_the_field(tenant: str, tmp_path: Path) -> None:
    document = write(tmp_path, example("eks", tenant))
    prices = tmp_path / "prices.yaml"
    prices.write_text("version: 1\ncurrency: USD\nonDemand:\n  aws:\n    p5.48xlarge: 98.32\n")
    text = runner.invoke(cli, ["fleet", "plan", document, "--prices", str(prices)], env={"COLUMNS": "200"})
    assert text.exit_code == EXIT_CHANGES, text.output
    assert "gpu-fleet/h100 (aws p5.48xlarge)  Nodes 0 → 4: 0.00 → 393.28 USD/h (+393.28)" in text.stdout
    as_json = runner.invoke(cli, ["fleet", "plan", document, "--prices", str(prices), "--json"])
    assert json.loads(as_json.stdout)["cost"]["delta"] == [393.28, 393.28], "2 Nodes in each of the 2 zones"

    prices.write_text("version: 1\nonDemand:\n  aws:\n    p5.48xlarge: cheap\n")
    bad = runner.invoke(cli, ["fleet", "plan", document, "--prices", str(prices), "--json"])
    assert bad.exit_code == EXIT_ERROR
    (problem,) = json.loads(bad.stderr)["error"]["problems"]
    assert problem["path"] == "/onDemand/aws/p5.48xlarge"
    assert problem["message"].startswith(f"in the price table {prices}: ")
    missing = runner.invoke(cli, ["fleet", "plan", document, "--prices", str(tmp_path / "none.yaml")])
    assert missing.exit_code == EXIT_ERROR and "cannot read the price table" in missing.stderr
