"""The operator's doors against the served control plane: the doctor route and `better-compute doctor`.

The server (the e2e world, with a substrate agent) answers GET /v1/doctor for the API key's
tenant; the CLI, whose own environment has no agent, reports that view when given BC_API_KEY
and says plainly when it checked only itself.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_world import SECRET, World
from typer.testing import CliRunner

from better_compute.cli.main import app


async def _doctor(world: World, key: str) -> dict[str, Any]:
    plane = world.cloud.control_plane
    verify = ssl.create_default_context(cadata=plane.ca_pem)
    async with httpx.AsyncClient(base_url=plane.url, verify=verify) as client:
        answer = await client.get("/v1/doctor", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_the_doctor_route_shows_only_the_callers_tenant(world: World) -> None:
    _, acme_key = await world.compute.iam.create_api_key(world.tenant_id)
    globex = await world.compute.iam.create_tenant("globex")
    _, globex_key = await world.compute.iam.create_api_key(globex.id)
    token = await world.compute.secrets.create(globex.id, world.cloud.doks_token)
    document = json.loads(json.dumps(world.document("doks")).replace(world.doks_token_ref, token))
    world.cloud.doks.faults.stockout("gpu-h100x8-640gb")
    await world.compute.fleet.apply(document, tenant_id=globex.id)
    pool = await world.compute.pools.get_by_name(globex.id, "gpu-fleet")

    async def errored() -> bool:
        return (await world.compute.kubernetes_substrates.get(tenant_id=globex.id, pool_id=pool.id)).state == "error"

    await world.until(errored, minutes=30, what="globex's substrate in error")
    theirs = await _doctor(world, globex_key)
    assert any(f["code"] == "kubernetes.substrate-error" and pool.id in f["message"] for f in theirs["findings"])
    ours = await _doctor(world, acme_key)
    assert pool.id not in json.dumps(ours), "another tenant's pool shows in acme's doctor"
    assert "kubernetes.substrate-agent-missing" not in {f["code"] for f in ours["findings"]}


@pytest.fixture
def cli_env(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's own environment: the world's database, no substrate agent, the control plane's CA."""
    for name in ("BC_APP", "BC_BCD_IMAGE", "BC_API_KEY", "BC_TENANT", "BC_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    ca = tmp_path / "ca.pem"
    ca.write_text(world.cloud.control_plane.ca_pem)
    monkeypatch.setenv("BC_DATABASE_URL", world.compute.db.url)
    monkeypatch.setenv("BC_SECRET", SECRET)
    monkeypatch.setenv("BC_BASE_URL", world.cloud.control_plane.url)
    monkeypatch.setenv("BC_CONTROL_PLANE_CA_FILE", str(ca))
    monkeypatch.setenv("BC_SQLITE_SHARED", "1")
    return ca


async def test_cli_doctor_reports_the_servers_view_with_an_api_key(
    world: World, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    own = await asyncio.to_thread(runner.invoke, app, ["doctor"])
    assert "checked only this command's own configuration" in own.stdout, own.output

    _, key = await world.compute.iam.create_api_key(world.tenant_id)
    monkeypatch.setenv("BC_API_KEY", key)
    served = await asyncio.to_thread(runner.invoke, app, ["doctor"])
    assert served.exit_code == 0, served.output
    assert served.stdout.startswith(f"server: {world.cloud.control_plane.url}"), served.output
    assert "kubernetes.substrate-agent-missing" not in served.stdout  # the server has an agent

    local = await asyncio.to_thread(runner.invoke, app, ["doctor", "--local"])
    assert "checked only this command's own configuration" in local.stdout

    monkeypatch.setenv("BC_API_KEY", "bck_not-a-key")
    refused = await asyncio.to_thread(runner.invoke, app, ["doctor"])
    assert refused.exit_code == 1 and "PERMISSION_DENIED" in str(refused.exception or refused.output)
