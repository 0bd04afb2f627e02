"""A BC_DATABASE_URL that is not a URL is one line naming the variable, and never a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.store import Database
from better_compute.store.db import normalize_url

SECRET = "a-cli-test-secret-of-at-least-32-chars"
NOT_URLS = ["::not a url::", "better-compute.db", "user:password@db.example/prod", " ", "sqlite:/x.db"]


@pytest.mark.parametrize("value", NOT_URLS)
def test_the_cli_refuses_a_database_that_is_not_a_url_and_creates_nothing(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BC_DATABASE_URL", value)
    monkeypatch.setenv("BC_SECRET", SECRET)
    monkeypatch.delenv("BC_APP", raising=False)
    result = CliRunner().invoke(app, ["tenants", "list"])
    assert result.exit_code == 1
    assert result.stderr == (
        "error: INVALID_INPUT at /BC_DATABASE_URL: BC_DATABASE_URL: the database is not a URL: "
        "use sqlite:///PATH or postgresql://USER@HOST/NAME\n"
    )
    assert "password" not in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", NOT_URLS)
def test_the_store_refuses_a_database_that_is_not_a_url(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ComputeError) as refused:
        Database(value)
    assert refused.value.code is ErrorCode.INVALID_INPUT
    assert list(tmp_path.iterdir()) == []


def test_urls_still_name_sqlite_and_postgresql() -> None:
    assert normalize_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert normalize_url("sqlite://") == "sqlite+aiosqlite://"
    assert normalize_url("postgres://u@h/d") == "postgresql+asyncpg://u@h/d"
