"""docs/cli.md, docs/api.md and docs/bcd.md say what the code does: the first two are generated, and checked here."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from better_compute.bcd.main import HELP as BCD_HELP
from better_compute.bcd.main import app as bcd_app
from better_compute.cli.docs import api_markdown, cli_markdown, standard_openapi
from better_compute.cli.main import app

DOCS = Path(__file__).resolve().parents[2] / "docs"
runner = CliRunner()


def test_docs_cli_md_is_generated_from_the_command_tree() -> None:
    expected = cli_markdown(typer.main.get_command(app))
    assert (DOCS / "cli.md").read_text() == expected, "run: better-compute docs cli > docs/cli.md"


def test_docs_api_md_is_generated_from_the_openapi_document() -> None:
    expected = api_markdown(standard_openapi())
    assert (DOCS / "api.md").read_text() == expected, "run: better-compute docs api > docs/api.md"


def test_every_command_and_route_is_in_the_docs() -> None:
    cli = (DOCS / "cli.md").read_text()
    for group in ("tenants", "api-keys", "secrets", "pools", "nodes", "reservations", "join-tokens", "fleet"):
        assert f"### `better-compute {group} " in cli
    api = (DOCS / "api.md").read_text()
    for path in standard_openapi()["paths"]:
        assert f"`{path}`" in api


def test_the_hidden_docs_command_prints_the_same_text() -> None:
    assert runner.invoke(app, ["docs", "cli"]).stdout == (DOCS / "cli.md").read_text()


def test_bcd_help_lists_every_variable_and_default_that_docs_bcd_md_documents() -> None:
    shown = runner.invoke(bcd_app, ["--help"]).stdout
    documented = (DOCS / "bcd.md").read_text()
    rows = re.findall(r"^  (N?[A-Z_]+)\s+.*\(([^)]*)\)$", BCD_HELP, flags=re.MULTILINE)
    assert len(rows) == 17
    for name, default in rows:
        assert name in shown and f"`{name}" in documented, name
        literal = default.split(";")[0].split(",")[0]
        if literal.startswith("/") or "." in literal:
            assert literal in documented, (name, literal)
    assert "<bool>" not in shown + runner.invoke(bcd_app, ["run", "--help"]).stdout
    assert "--insecure-gateway" in documented and "--insecure-join" in documented and "--version" in documented


def test_boolean_flags_show_no_value_in_any_help() -> None:
    docs = cli_markdown(typer.main.get_command(app))
    assert "<bool>" not in docs
    assert "- `--json`: Print JSON" in docs and "- `--yes, -y`" not in docs.replace("- `-y, --yes`", "")
