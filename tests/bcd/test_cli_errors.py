"""bcd's own mistakes are one line: `bcd pin` on a missing file or a key, and `bcd --version`."""

from __future__ import annotations

from pathlib import Path

import trustme
from typer.testing import CliRunner

from better_compute.bcd.main import app

runner = CliRunner()


def test_bcd_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("bcd 0.")


def test_bcd_pin_on_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["pin", str(tmp_path / "gw.pem")])
    assert result.exit_code == 1
    assert result.stderr == f"bcd: error: cannot read {tmp_path / 'gw.pem'}: No such file or directory\n"


def test_bcd_pin_on_a_private_key_says_to_give_the_certificate(tmp_path: Path) -> None:
    key = trustme.CA().issue_cert("gw").private_key_pem.bytes()
    (tmp_path / "tls.key").write_bytes(key)
    result = runner.invoke(app, ["pin", str(tmp_path / "tls.key")])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"bcd: error: {tmp_path / 'tls.key'} is not a PEM or DER certificate")
    assert len(result.stderr.splitlines()) == 1 and "BEGIN" not in result.stderr
