"""Every everyday mistake is one line and a documented exit status, never a traceback."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from better_compute.cli.main import main
from better_compute.cli.prompt import confirm

SECRET = "a-cli-errors-test-secret-of-32-chars-at-least"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No BC_* settings at all, a private data directory, and no terminal width."""
    for name in list(os.environ):
        if name.startswith("BC_") or name == "COLUMNS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("BC_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.out, captured.err


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_a_database_that_is_not_upgraded_says_to_run_db_upgrade(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BC_DATABASE_URL", f"sqlite:///{env / 'fresh.db'}")
    monkeypatch.setenv("BC_SECRET", SECRET)
    code, out, err = call(capsys, "tenants", "list")
    assert code == 1 and out == ""
    assert one_line(err).startswith("error: INVALID_STATE: the database schema is not current")
    assert "run `better-compute db upgrade` first" in err
    assert call(capsys, "db", "upgrade")[0] == 0
    assert call(capsys, "tenants", "list")[0] == 0


def test_the_embedded_default_lives_in_the_data_directory_and_upgrades_itself(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(env)
    code, out, _ = call(capsys, "tenants", "create", "acme")
    assert code == 0 and out.startswith("ten_")
    secret = env / "data" / "secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert not (env / "better-compute.db").exists()  # nothing in the working directory
    code, out, _ = call(capsys, "doctor")
    assert code == 0
    assert f"database: sqlite:///{env / 'data' / 'better-compute.db'} (embedded SQLite" in out
    monkeypatch.chdir(env.parent)
    assert "acme" in call(capsys, "tenants", "list")[1]  # the same database from anywhere


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://postgres@127.0.0.1:9/none", "the database refused the connection"),
        ("postgresql://postgres@host.invalid/none", "the database host name does not resolve"),
        ("postgresql://postgres@127.0.0.1:5432/no_such_database", 'database "no_such_database" does not exist'),
        ("sqlite:////no/such/directory/bc.db", "directory /no/such/directory does not exist"),
    ],
)
def test_a_database_that_cannot_be_reached_is_one_line(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("BC_DATABASE_URL", url)
    monkeypatch.setenv("BC_SECRET", SECRET)
    code, out, err = call(capsys, "pools", "list", "--tenant", "acme")
    assert code == 1 and out == ""
    assert expected in one_line(err) and "/BC_DATABASE_URL" in err


def test_with_json_errors_are_json_too(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert call(capsys, "tenants", "create", "acme")[0] == 0
    code, out, err = call(capsys, "pools", "get", "nope", "--tenant", "acme", "--json")
    assert code == 1 and out == ""
    assert json.loads(err) == {"error": {"code": "NOT_FOUND", "message": "no pool named 'nope'", "path": "/name"}}
    code, _, err = call(capsys, "pools", "list", "--no-such-flag", "--json")
    assert code == 2 and json.loads(err)["error"]["code"] == "USAGE"


def test_usage_errors_exit_2_and_version_prints(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = call(capsys, "pools", "list", "--no-such-flag")
    assert code == 2 and "No such option" in err
    code, out, _ = call(capsys, "--version")
    assert code == 0 and out.startswith("better-compute 0.")


def test_output_piped_to_a_file_is_not_wrapped_at_80_columns(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert call(capsys, "tenants", "create", "acme")[0] == 0
    reference = call(capsys, "secrets", "create", "--tenant", "acme", "--from-file", __file__)[1].strip()
    _, out, _ = call(capsys, "secrets", "list", "--tenant", "acme")
    row = next(line for line in out.splitlines() if reference in line)
    assert len(row.rstrip()) > 80  # the reference and the time stay on one line


def test_a_secret_file_that_cannot_be_read_is_one_line(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = call(capsys, "secrets", "create", "--tenant", "acme", "--from-file", str(env / "missing"))
    assert code == 1 and "cannot read" in one_line(err)


def test_ctrl_c_at_the_apply_prompt_exits_130_with_nothing_changed(env: Path) -> None:
    document = {"version": 1, "sites": [{"name": "k8s", "kind": "shared", "region": "tor1"}]}
    (env / "fleet.json").write_text(json.dumps(document))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BC_")}
    environment |= {"BC_DATA_DIR": str(env / "data"), "BC_TENANT": "acme"}
    command = [sys.executable, "-c", "import sys; from better_compute.cli.main import main; sys.exit(main())"]
    subprocess.run([*command, "tenants", "create", "acme"], env=environment, check=True, capture_output=True)
    process = subprocess.Popen(
        [*command, "fleet", "apply", str(env / "fleet.json")],
        env=environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    prompt = ""
    while "[y/N]" not in prompt and time.monotonic() < deadline:
        prompt += process.stderr.read(1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "interrupted: nothing was changed." in err
    listing = subprocess.run([*command, "fleet", "plan", str(env / "fleet.json")], env=environment, capture_output=True)
    assert listing.returncode == 2  # the site is still to create: nothing was applied


def test_the_prompt_reads_its_answer_in_a_thread_that_takes_no_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the main thread may set a signal handler: a command run in another thread (an embedding program,
    a test's CliRunner in asyncio.to_thread) still asks, and takes the answer (it raised ValueError before)."""
    answers = iter(["y", "no"])
    monkeypatch.setattr("builtins.input", lambda: next(answers))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(confirm, "Go on?").result() is True
        assert pool.submit(confirm, "Go on?").result() is False
