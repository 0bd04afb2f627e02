"""bcd join against the real endpoint: once with the token, never again; refusals said plainly."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest

from better_compute.bcd.agent import Agent
from better_compute.bcd.credentials import CredentialStore
from better_compute.bcd.join import JoinError, join
from better_compute.bcd.state import NodeState
from better_compute.gateway.join_limit import JoinLimit
from better_compute.gateway.joining import JoinHooks, Proof
from better_compute.gateway.service import Gateway
from better_compute.testing.loopback import LoopbackServer

from .conftest import Tls, World, node_config, node_inventory
from .helpers import joined_node


class NoNetwork(httpx.AsyncBaseTransport):
    """Fails any request: proves a code path never called the control plane."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"unexpected request to {request.url}")


async def test_a_restarted_bcd_needs_no_token(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    stored = CredentialStore(config.state_dir).path
    assert stored.stat().st_mode & 0o777 == 0o600
    assert credential.credential not in repr(credential)

    config.token_file.unlink()  # the Secret is gone (every Node joined: the substrate deleted it)
    again = await join(config, node_inventory("node-a"), clock=world.clock, transport=NoNetwork())
    assert again == credential

    agent = Agent(config, again, node_inventory("node-a"), NodeState([]), clock=world.clock)
    task = asyncio.create_task(agent.session())
    await asyncio.wait_for(agent.connected.wait(), 10)
    assert await gateway.is_connected(credential.node_id)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_used_up_token_is_refused_with_the_reason(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    await gateway.tokens.revoke(world.tenant_id, token.id)
    config = node_config(server, tls, tmp_path, "node-a")
    config.token_file.write_text(value + "\n")
    with pytest.raises(JoinError, match="refused to join this node: PERMISSION_DENIED: the join token was revoked"):
        await join(config, node_inventory("node-a"), clock=world.clock)
    assert CredentialStore(config.state_dir).load() is None


async def test_no_credential_and_no_token_says_what_to_check(world: World, tmp_path: Path, tls: Tls) -> None:
    from better_compute.bcd.config import BcdConfig

    config = BcdConfig(control_plane_url="https://127.0.0.1:1", token_file=tmp_path / "missing", state_dir=tmp_path)
    with pytest.raises(JoinError, match="is the join Secret mounted"):
        await join(config, node_inventory("node-a"), clock=world.clock)


async def test_an_unreachable_control_plane_is_retried_with_backoff_on_the_clock(world: World, tmp_path: Path) -> None:
    from better_compute.bcd.config import BcdConfig

    calls: list[float] = []

    class Down(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            calls.append((world.clock.now() - start).total_seconds())
            raise httpx.ConnectError("connection refused")

    (tmp_path / "token").write_text("bcj_" + "x" * 40)
    config = BcdConfig(control_plane_url="https://cp.example", token_file=tmp_path / "token", state_dir=tmp_path)
    start = world.clock.now()
    attempt = asyncio.create_task(
        join(config, node_inventory("node-a"), clock=world.clock, attempts=3, transport=Down())
    )
    while not attempt.done():
        await asyncio.sleep(0)
        wake = world.clock.next_wakeup()
        if wake is not None:
            world.clock.advance_to(wake)
    with pytest.raises(JoinError, match="cannot reach the control plane"):
        attempt.result()
    assert len(calls) == 3
    assert calls[0] == 0 and 1 <= calls[1] <= 2 and 3 <= calls[2] <= 6  # 2 s then 4 s ceilings, equal jitter


async def test_a_pod_environment_joins_and_runs_the_node(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, socket_dir: Path
) -> None:
    from better_compute.bcd.config import BcdConfig
    from better_compute.bcd.daemon import join_and_run

    from .conftest import start_kubelet
    from .helpers import connected, eventually

    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    (socket_dir / "token").write_text(value)
    env = {
        "BCD_CONTROL_PLANE_URL": server.url,
        "BCD_GATEWAY_URL": server.url.replace("https://", "wss://"),
        "BCD_PINS": tls.pin,
        "BCD_CA_FILE": str(tls.ca_file),
        "BCD_JOIN_TOKEN_FILE": str(socket_dir / "token"),
        "BCD_STATE_DIR": str(socket_dir / "state"),
        "BCD_KUBELET_SOCKET": str(socket_dir / "kubelet.sock"),
        "BCD_SIMULATED_GPUS": "4xH100",
        "BCD_HOSTNAME": "ip-10-0-0-7",
        "NODE_NAME": "eks-gpu-7",
    }
    kubelet, kubelet_server = await start_kubelet(socket_dir / "kubelet.sock")
    task = asyncio.create_task(join_and_run(BcdConfig.from_env(env), clock=world.clock))
    try:
        await eventually(lambda: len(kubelet.requests) == 1)
        (node,) = await world.compute.nodes.list(world.tenant_id)
        assert node.name == "eks-gpu-7" and len(node.devices) == 4
        await eventually(connected(gateway, node.id))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kubelet_server.stop(grace=None)


async def test_joins_past_the_cap_are_told_to_come_back_and_bcd_waits_as_asked(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    """One join in flight holds the only slot: another is refused at once with 503, UNAVAILABLE
    and Retry-After, and bcd tries again no sooner than that, on its clock, and joins."""
    gateway.joins = JoinLimit(1)
    release = asyncio.Event()

    async def slow_proof(*, pool_id: str, node_name: str, identity_token: str | None) -> Proof | None:
        await release.wait()  # the first join sits here, in its slot
        return None

    gateway.register_hooks(JoinHooks(identity=slow_proof))
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=3)
    first = node_config(server, tls, tmp_path, "node-a")
    first.token_file.write_text(value)
    holding = asyncio.create_task(join(first, node_inventory("node-a"), clock=world.clock))
    while gateway.joins.count == 0:
        await asyncio.sleep(0.01)

    body = {"token": value, "inventory": node_inventory("node-b").model_dump(mode="json", by_alias=True)}
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(tls.ca_file))) as client:
        refused = await client.post(f"{server.url}/v1/gateway/join", json=body)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["code"] == "UNAVAILABLE"
    assert "working on 1 joins" in refused.json()["error"]["message"]

    second = node_config(server, tls, tmp_path, "node-b")
    second.token_file.write_text(value)
    waiting = asyncio.create_task(join(second, node_inventory("node-b"), clock=world.clock))
    start = world.clock.now()
    while world.clock.next_wakeup() is None:
        await asyncio.sleep(0.01)
    assert (world.clock.next_wakeup() - start).total_seconds() >= 2.0  # type: ignore[operator]
    release.set()
    assert (await holding).node_id
    world.clock.advance(30)
    assert (await waiting).node_id
    assert gateway.joins.count == 0
