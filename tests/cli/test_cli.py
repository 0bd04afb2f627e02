"""The better-compute command line, driven in-process on SQLite files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.server import better_compute

SECRET = "a-cli-test-secret-of-at-least-32-chars"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("BC_DATABASE_URL", url)
    monkeypatch.setenv("BC_SECRET", SECRET)
    monkeypatch.delenv("BC_APP", raising=False)
    monkeypatch.delenv("BC_TENANT", raising=False)
    return url


runner = CliRunner()


def test_doctor_fails_until_the_schema_is_upgraded(env: str) -> None:
    before = runner.invoke(app, ["doctor"])
    assert before.exit_code == 1
    assert "store.schema-outdated" in before.output
    upgraded = runner.invoke(app, ["db", "upgrade"])
    assert upgraded.exit_code == 0, upgraded.output
    assert "schema is current" in upgraded.output
    after = runner.invoke(app, ["doctor"])
    assert after.exit_code == 0, after.output
    assert "store.schema-outdated" not in after.output
    assert "store.sqlite-single-process" in after.output


def test_tenants_and_api_keys_are_created_and_the_key_works(env: str) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    created = runner.invoke(app, ["tenants", "create", "acme"])
    assert created.exit_code == 0, created.output
    tenant_id = created.stdout.strip()
    key = runner.invoke(app, ["api-keys", "create", "--tenant", tenant_id])
    assert key.exit_code == 0, key.output
    plain = key.stdout.strip()

    async def authenticate() -> str:
        compute = better_compute(database=env, secret=SECRET)
        try:
            return (await compute.iam.authenticate(plain)).tenant_id
        finally:
            await compute.close()

    assert asyncio.run(authenticate()) == tenant_id


def test_a_compute_error_is_one_line_and_exit_status_one(env: str) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    result = runner.invoke(app, ["api-keys", "create", "--tenant", "ten_missing"])
    assert result.exit_code == 1
    assert result.stderr == "error: NOT_FOUND at /tenant: no tenant 'ten_missing' (see `better-compute tenants list`)\n"
    assert result.stdout == ""


def test_the_tenant_can_come_from_the_environment(env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    result = runner.invoke(app, ["api-keys", "create"])
    assert result.stderr == "error: INVALID_INPUT at /tenant: name the tenant with --tenant or BC_TENANT\n"
    tenant_id = runner.invoke(app, ["tenants", "create", "env-tenant"]).stdout.strip()
    monkeypatch.setenv("BC_TENANT", tenant_id)
    assert runner.invoke(app, ["api-keys", "create"]).stdout.startswith("bck_")


def test_without_a_secret_the_cli_says_what_to_set(env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BC_SECRET")
    for args in (["doctor"], ["db", "upgrade"], ["serve"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1
        assert result.stderr.startswith("error: INVALID_INPUT at /BC_SECRET: set BC_SECRET")


def test_serve_refuses_a_database_that_is_not_upgraded(env: str) -> None:
    result = runner.invoke(app, ["serve", "--port", "0"])
    assert result.exit_code == 1
    assert "run `better-compute db upgrade`" in result.stderr


def test_serve_says_which_tls_file_is_wrong(env: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--port", "0", "--tls-key-file", str(tmp_path / "key.pem")])
    assert result.exit_code == 1
    assert result.stderr == "error: INVALID_INPUT at /tls-key-file: --tls-key-file needs --tls-cert-file\n"
    missing = tmp_path / "cert.pem"
    result = runner.invoke(app, ["serve", "--port", "0", "--tls-cert-file", str(missing)])
    assert result.exit_code == 1
    assert result.stderr == f"error: INVALID_INPUT at /tls-cert-file: --tls-cert-file: no file at {missing}\n"


def test_app_names_your_own_compute(env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_compute_app.py").write_text(
        "from better_compute.server import better_compute\n"
        f"compute = better_compute(database={env!r}, secret={SECRET!r}, base_url='nope')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BC_SECRET")
    assert runner.invoke(app, ["db", "upgrade", "--app", "my_compute_app:compute"]).exit_code == 0
    result = runner.invoke(app, ["doctor", "--app", "my_compute_app:compute"])
    assert result.exit_code == 1, "its bad base_url is an error finding"
    assert "server.base-url-invalid" in result.stdout
    bad = runner.invoke(app, ["doctor", "--app", "my_compute_app"])
    assert bad.stderr == "error: INVALID_INPUT at /app: --app takes module:attribute, not 'my_compute_app'\n"
    missing = runner.invoke(app, ["doctor", "--app", "no_such_module_here:compute"])
    assert missing.stderr.startswith("error: NOT_FOUND at /app: cannot import 'no_such_module_here'")


def test_demo_without_its_fleet_document_says_so_in_one_line(tmp_path: Path) -> None:
    """The story itself runs in tests/demo; here only its input."""
    result = runner.invoke(app, ["demo", "--fleet", str(tmp_path / "missing.json")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: NOT_FOUND at /fleet: no fleet document at ")


def test_fleet_and_pools_commands_are_registered() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("fleet", "pools", "db", "serve", "doctor", "demo", "tenants", "api-keys"):
        assert command in result.stdout
    assert runner.invoke(app, ["fleet", "--help"]).exit_code == 0
    assert runner.invoke(app, ["pools", "--help"]).exit_code == 0


def test_without_app_the_standard_control_plane_plans_and_applies_a_fleet(env: str) -> None:
    """As the spec shows it: `better-compute fleet plan fleet.json` with nothing but the environment."""
    example = str(Path(__file__).resolve().parents[2] / "examples" / "fleet-gke.json")
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    tenant = runner.invoke(app, ["tenants", "create", "acme"]).output.split()[-1]
    pending = runner.invoke(app, ["fleet", "plan", example, "--tenant", tenant])
    assert pending.exit_code == 2, pending.output
    assert "3 to create" in pending.output
    applied = runner.invoke(app, ["fleet", "apply", example, "--tenant", tenant, "--yes"])
    assert applied.exit_code == 0, applied.output
    settled = runner.invoke(app, ["fleet", "plan", example, "--tenant", tenant])
    assert settled.exit_code == 0, settled.output


def test_the_standard_control_plane_has_every_installed_provider(env: str) -> None:
    from better_compute.cli.context import load_compute

    compute = load_compute(None)
    assert sorted(compute.module("vps").providers) == ["aws", "digitalocean", "gcp"]  # type: ignore[attr-defined]
    assert compute.module("fleet").name == "fleet"
