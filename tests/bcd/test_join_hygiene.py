"""bcd join's hygiene: the token never travels in the clear without an opt-in, the pod's identity
token goes with it where one is mounted, and the credential file is never readable by others,
whatever a crash left behind."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import CredentialStore, NodeCredential
from better_compute.bcd.inventory import simulated_gpus
from better_compute.bcd.join import JoinError, join
from better_compute.bcd.main import app
from better_compute.core.clock import SimClock
from better_compute.wire.protocol import Inventory, OsInfo

TOKEN = "bcjt_the-join-token-value"


class RecordingControlPlane(httpx.AsyncBaseTransport):
    """A control plane that accepts every join and records what it was sent."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = {"nodeId": "node-1", "poolId": "pool-1", "credential": "bcnc_a-node-credential"}
        return httpx.Response(200, json=body)


def _inventory() -> Inventory:
    return Inventory(
        os=OsInfo(hostname="n.internal", kubernetes_node_name="n", kernel="6.8.0", arch="x86_64"),
        gpus=simulated_gpus("1xH100", "n"),
    )


def _config(tmp_path: Path, url: str, **changes: object) -> BcdConfig:
    (tmp_path / "token").write_text(TOKEN)
    return BcdConfig(control_plane_url=url, token_file=tmp_path / "token", state_dir=tmp_path / "state").override(
        **changes
    )


async def test_a_plain_http_control_plane_is_refused_before_the_token_is_sent(tmp_path: Path) -> None:
    control_plane = RecordingControlPlane()
    config = _config(tmp_path, "http://cp.example")
    with pytest.raises(JoinError, match=r"http://cp\.example is not TLS and the join token would travel in the clear"):
        await join(config, _inventory(), clock=SimClock(), transport=control_plane)
    assert control_plane.requests == []
    assert CredentialStore(config.state_dir).load() is None


async def test_plain_http_joins_only_with_the_opt_in(tmp_path: Path) -> None:
    control_plane = RecordingControlPlane()
    config = _config(tmp_path, "http://cp.example", insecure_join=True)
    credential = await join(config, _inventory(), clock=SimClock(), transport=control_plane)
    assert credential.node_id == "node-1"
    assert [str(r.url) for r in control_plane.requests] == ["http://cp.example/v1/gateway/join"]


def test_the_opt_in_comes_from_the_environment() -> None:
    assert BcdConfig.from_env({"BCD_INSECURE_JOIN": "1"}).insecure_join
    assert not BcdConfig.from_env({}).insecure_join


def test_bcd_join_on_http_fails_in_one_line_naming_the_opt_in(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    args = ["join", "--control-plane-url", "http://127.0.0.1:1", "--token-file", str(tmp_path / "token")]
    result = CliRunner().invoke(
        app, [*args, "--state-dir", str(tmp_path)], env={"BCD_SIMULATED_GPUS": "1xH100", "BCD_INSECURE_JOIN": ""}
    )
    assert result.exit_code == 1
    assert "is not TLS" in result.stderr and "--insecure-join" in result.stderr
    assert "Traceback" not in result.output


def test_a_stale_world_readable_temporary_file_does_not_make_the_credential_readable(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    stale = store.path.with_suffix(".tmp")
    stale.write_text("left by a crash")
    stale.chmod(0o644)
    store.save(NodeCredential(node_id="node-1", pool_id="pool-1", credential="bcnc_a-node-credential"))
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert not stale.exists()
    assert store.load() == NodeCredential(node_id="node-1", pool_id="pool-1", credential="bcnc_a-node-credential")


def test_a_stale_temporary_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not yours")
    (tmp_path / "state").mkdir()
    store = CredentialStore(tmp_path / "state")
    store.path.with_suffix(".tmp").symlink_to(elsewhere)
    store.save(NodeCredential(node_id="node-1", pool_id="pool-1", credential="bcnc_a-node-credential"))
    assert elsewhere.read_text() == "not yours"
    assert not store.path.is_symlink()
    assert json.loads(store.path.read_text())["nodeId"] == "node-1"


async def test_the_pods_identity_token_is_sent_when_mounted_and_only_then(tmp_path: Path) -> None:
    control_plane = RecordingControlPlane()
    identity = tmp_path / "identity-token"
    config = _config(tmp_path, "https://cp.example", identity_token_file=identity)
    await join(config, _inventory(), clock=SimClock(), transport=control_plane)
    identity.write_text("eyJhbGciOiJFUzI1NiJ9.the-projected-token.sig\n")
    (config.state_dir / "node-credential.json").unlink()
    await join(config, _inventory(), clock=SimClock(), transport=control_plane)
    first, second = (json.loads(r.content) for r in control_plane.requests)
    assert "identityToken" not in first
    assert second["identityToken"] == "eyJhbGciOiJFUzI1NiJ9.the-projected-token.sig"
    assert BcdConfig.from_env({"BCD_IDENTITY_TOKEN_FILE": "/x/token"}).identity_token_file == Path("/x/token")
