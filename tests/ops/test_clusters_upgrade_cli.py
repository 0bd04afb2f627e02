"""`better-compute clusters upgrade` on SQLite and PostgreSQL: refused asks say which field, change nothing.

The whole upgrade, on every provider's emulator, is in tests/e2e/test_substrate_upgrade.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from ops_world import Seeded, point_the_cli_at, seeded
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.store import Database

runner = CliRunner()


@pytest.fixture
def world(database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    point_the_cli_at(monkeypatch, database_url)
    return asyncio.run(seeded(database_url))


def test_an_unknown_cluster_is_not_found_and_a_bad_version_names_the_field(world: Seeded) -> None:
    missing = runner.invoke(app, ["clusters", "upgrade", "kcl_nope", "--version", "1.32"])
    assert missing.exit_code == 1 and missing.stderr.startswith("error: NOT_FOUND at /clusterId"), missing.stderr
    bad = runner.invoke(app, ["clusters", "upgrade", "kcl_nope", "--version", "not-a-version", "--json"])
    assert bad.exit_code == 1
    error = json.loads(bad.stderr or bad.stdout)["error"]
    assert (error["code"], error["path"]) == ("INVALID_INPUT", "/version")
    listed = runner.invoke(app, ["clusters", "list", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout) == [], "nothing was made"


def test_the_version_is_required(world: Seeded) -> None:
    result = runner.invoke(app, ["clusters", "upgrade", "kcl_nope"])
    assert result.exit_code == 2 and "--version" in result.output
