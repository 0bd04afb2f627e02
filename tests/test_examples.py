"""examples/: fleet.json is a valid FleetConfig document, and examples/compute.py is a control plane that serves."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.fleet import FleetDocument

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECRET = "an-examples-test-secret-of-32-chars-or-more"
APP = "examples.compute:compute"


def test_fleet_json_has_one_gpu_pool_on_each_provider() -> None:
    document = FleetDocument.model_validate(json.loads((ROOT / "examples" / "fleet.json").read_text()))
    providers = {account.name: account.provider for account in document.provider_accounts}
    assert sorted(providers[pool.policy.substrate.account] for pool in document.pools) == [  # type: ignore[union-attr]
        "aws",
        "digitalocean",
        "gcp",
    ]
    assert all(pool.gpu_model == "H100" for pool in document.pools)


@pytest.fixture
def examples_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.chdir(ROOT)
    for name in [k for k in os.environ if k.startswith("BC_")]:
        monkeypatch.delenv(name)
    env = {"BC_SECRET": SECRET, "BC_DATABASE_URL": f"sqlite:///{tmp_path / 'examples.db'}"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_examples_compute_imports_and_self_checks(
    examples_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # piped output is never cut to a window's width
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--app", APP]).exit_code == 0
    without_agent = runner.invoke(app, ["doctor", "--app", APP])
    assert "kubernetes.substrate-agent-missing" in without_agent.stdout, "without BC_BCD_IMAGE the check says so"
    monkeypatch.setenv("BC_BCD_IMAGE", "ghcr.io/better-compute/bcd:0.1.0")
    monkeypatch.setenv("BC_GATEWAY_URL", "wss://control.example.com")
    monkeypatch.setenv("BC_GATEWAY_PINS", "sha256/" + "A" * 43 + "=")
    monkeypatch.setenv("BC_BASE_URL", "https://control.example.com")
    with_agent = runner.invoke(app, ["doctor", "--app", APP])
    assert with_agent.exit_code == 0, with_agent.output
    assert "kubernetes.substrate-agent-missing" not in with_agent.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_runs_the_example_app(examples_env: dict[str, str]) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BC_")}, **examples_env}
    subprocess.run([str(BIN / "better-compute"), "db", "upgrade", "--app", APP], cwd=ROOT, env=env, check=True)
    port = _free_port()
    server = subprocess.Popen(
        [str(BIN / "better-compute"), "serve", "--app", APP, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        answer = None
        for _ in range(600):  # real startup time (a process starting), not a simulated duration
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None:
                    break
                time.sleep(0.1)
        assert answer is not None and answer.status_code == 200, server.stdout.read() if server.stdout else ""
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
