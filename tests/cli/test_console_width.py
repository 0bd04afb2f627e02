"""The consoles read COLUMNS when they print, not once when the CLI is imported."""

from __future__ import annotations

import pytest

from better_compute.cli.console import UNWRAPPED_WIDTH, _Console


def test_columns_set_before_construction_and_cleared_after_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    console = _Console()
    assert console.size.width == 80
    monkeypatch.delenv("COLUMNS")
    assert console.size.width == UNWRAPPED_WIDTH  # not a terminal: never wrapped


def test_columns_set_after_construction_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = _Console()
    monkeypatch.setenv("COLUMNS", "123")
    assert console.size.width == 123
