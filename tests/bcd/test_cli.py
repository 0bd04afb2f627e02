"""The bcd command: inventory, pin, and the plain failure messages of join and run."""

from __future__ import annotations

import json
from pathlib import Path

import trustme
from typer.testing import CliRunner

from better_compute.bcd.main import app
from better_compute.bcd.pins import spki_pin

runner = CliRunner()


def test_bcd_inventory_prints_the_simulated_gpus_and_the_node_name() -> None:
    result = runner.invoke(app, ["inventory"], env={"BCD_SIMULATED_GPUS": "8xH100", "NODE_NAME": "node-7"})
    assert result.exit_code == 0, result.output
    inventory = json.loads(result.stdout)
    assert len(inventory["gpus"]) == 8 and inventory["os"]["kubernetesNodeName"] == "node-7"


def test_bcd_pin_prints_the_certificate_pin(tmp_path: Path) -> None:
    pem = trustme.CA().issue_cert("gw").cert_chain_pems[0].bytes()
    (tmp_path / "gw.pem").write_bytes(pem)
    result = runner.invoke(app, ["pin", str(tmp_path / "gw.pem")])
    assert result.exit_code == 0 and result.stdout.strip() == spki_pin(pem)


def test_bcd_join_without_token_says_to_check_the_secret(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "join",
            "--control-plane-url",
            "https://cp.example",
            "--token-file",
            str(tmp_path / "t"),
            "--state-dir",
            str(tmp_path),
        ],
        env={"BCD_SIMULATED_GPUS": "1xH100"},
    )
    assert result.exit_code == 1
    assert "is the join Secret mounted?" in result.stderr


def test_bcd_run_before_join_says_to_run_join(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["run", "--gateway-url", "wss://gw.example", "--state-dir", str(tmp_path)],
        env={"BCD_SIMULATED_GPUS": "1xH100"},
    )
    assert result.exit_code == 1
    assert "run `bcd join` first" in result.stderr
