"""`Cloud(bcd_processes=K)` runs every Node's bcd (join, gateway agent) in worker processes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.core.clock import SimClock
from better_compute.server import Compute
from better_compute.store import Database
from better_compute.testing import Cloud
from better_compute.testing.bcd_runtime import BcdPodRuntime
from better_compute.testing.bcd_workers import BcdWorkerDied, BcdWorkerError, BcdWorkerRuntime
from better_compute.testing.kube.gpus import AL2023_NVIDIA, NodeGpus
from better_compute.testing.kube.runtime import ContainerRun, NodeRun, PodRun

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "bcd-workers-server-secret-0123456789abcdef"


async def step(cloud: Cloud, compute: Compute, seconds: float = 5.0, pause: float = 0.005) -> None:
    await compute.run_until_idle(until=cloud.clock.now() + timedelta(seconds=seconds))
    await cloud.settle()
    await asyncio.sleep(pause)


def bcd_tasks_here() -> list[str]:
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("bcd:")]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_nodes_join_and_keep_their_sessions_with_bcd_in_worker_processes(database: Database) -> None:
    cloud = Cloud(bcd_processes=2)
    await cloud.start()
    compute = cloud.compute(database.url, SECRET)
    workers = cloud.bcd_workers
    assert workers is not None
    processes = [w.process for w in workers.workers]
    try:
        tenant = await compute.iam.create_tenant("acme")
        cloud.serve(compute)
        document: dict[str, Any] = json.loads((EXAMPLES / "fleet-gke.json").read_text())
        await compute.fleet.apply(document, tenant_id=tenant.id)
        hub = compute.module("gateway").gateway.hub  # type: ignore[attr-defined]

        async def joined() -> list[str]:
            view = await compute.kubernetes_substrates.get(tenant_id=tenant.id, pool_id="gpu-fleet")
            return list(view.nodes_joined) if view.state == "ready" and view.nodes_listed == view.nodes_joined else []

        deadline = cloud.clock.now() + timedelta(minutes=60)
        while len(await joined()) < 2:
            assert cloud.clock.now() < deadline, "the Nodes did not join within 60 simulated minutes"
            await step(cloud, compute)
            while cloud.bcd.joining or len(hub.connections) < len(cloud.bcd.joined):
                await asyncio.sleep(0.01)  # joins and sessions take real time (in the workers)
                await compute.run_until_idle()

        assert cloud.bcd.joins == 2 and cloud.bcd.runs == 2
        members = await compute.nodes.list(tenant.id)
        assert [len(n.devices) for n in members] == [8, 8], "bcd joined once GKE's driver was loaded, with its GPUs"
        assert sorted(cloud.bcd.joined) == sorted(await joined())
        assert len(hub.connections) == 2
        assert bcd_tasks_here() == [], "no bcd runs in this process"
        assert sum(w.load for w in workers.workers) == 2, "each worker hosts what it was given"
        assert all(p.returncode is None for p in processes)

        # The workers' clocks follow this one: heartbeats keep the same sessions over ten timeouts.
        sessions = {c.session_id for c in hub.connections.values()}
        for _ in range(5 * 60 // 5):
            await step(cloud, compute, pause=0.02)
        assert len(await joined()) == 2
        assert {c.session_id for c in hub.connections.values()} == sessions
        for connection in hub.connections.values():
            assert cloud.clock.now() - connection.last_heartbeat < timedelta(seconds=hub.timeout_seconds)
    finally:
        await cloud.stop()
        await compute.close()
    assert all(p.returncode is not None for p in processes), "stopping the Cloud ends its workers"
    assert workers.workers == []


def pod(
    tmp_path: Path, args: str, env: dict[str, str], files: dict[str, bytes] | None = None
) -> tuple[PodRun, NodeRun]:
    asked = {**env, "NVIDIA_VISIBLE_DEVICES": "all"}  # as bcd's DaemonSet asks the NVIDIA runtime for its GPUs
    container = ContainerRun("bcd", "bcd:dev", (), (args,), asked, files or {}, init=args == "join")
    run = PodRun("bcd-x", "bc-system", "uid-1", "node-1", container, {"spec": {}})
    gpus = NodeGpus(count=8, model="H100", runtime=AL2023_NVIDIA)
    node = NodeRun("node-1", {}, {}, tmp_path / "plugins", tmp_path / "host", gpus)
    return run, node


UNREACHABLE_JOIN = {
    # nothing listens there: the join retries with backoff on the simulated clock
    "BCD_CONTROL_PLANE_URL": "http://127.0.0.1:9",
    "BCD_INSECURE_JOIN": "1",
    "BCD_JOIN_TOKEN_FILE": "/var/run/bcd/join/token",
    "BCD_STATE_DIR": "/var/lib/bcd",
}
TOKEN = {"/var/run/bcd/join/token": b"bcjt_not-a-token"}


async def test_a_bcd_failure_in_a_worker_fails_the_container_with_its_error(tmp_path: Path) -> None:
    runtime = BcdWorkerRuntime(SimClock(), 1, root=tmp_path / "nodes")
    await runtime.start()
    try:
        run, node = pod(tmp_path, "run", {"BCD_STATE_DIR": "/var/lib/bcd"})
        with pytest.raises(BcdWorkerError, match="NotJoinedError: no node credential"):
            await asyncio.wait_for(runtime(run, node), 30)
        assert runtime.runs == 1
    finally:
        await runtime.stop()
        runtime.close()


async def test_the_workers_sleep_on_a_clock_that_follows_the_callers(tmp_path: Path) -> None:
    clock = SimClock()
    runtime = BcdWorkerRuntime(clock, 1, root=tmp_path / "nodes")
    await runtime.start()
    try:
        run, node = pod(tmp_path, "join", UNREACHABLE_JOIN, TOKEN)
        joining = asyncio.create_task(runtime(run, node))
        await asyncio.sleep(1.0)
        assert not joining.done(), "the join waits to retry until the simulated clock moves"
        assert runtime.joining == 0, "a join sleeping out its back-off is not under way (the worker says so)"
        for _ in range(300):
            if joining.done():
                break
            clock.advance(60)  # past every backoff: the worker's join retries, five attempts in all
            await asyncio.sleep(0.1)
        with pytest.raises(BcdWorkerError, match="JoinError: cannot reach the control plane"):
            await asyncio.wait_for(joining, 30)
        assert runtime.joins == 1 and runtime.joining == 0
        assert runtime.joined == set(), "a failed join is no joined Node"
    finally:
        await runtime.stop()
        runtime.close()


async def test_a_worker_that_dies_fails_the_pods_it_hosted(tmp_path: Path) -> None:
    runtime = BcdWorkerRuntime(SimClock(), 1, root=tmp_path / "nodes")
    await runtime.start()
    try:
        run, node = pod(tmp_path, "join", UNREACHABLE_JOIN, TOKEN)
        joining = asyncio.create_task(runtime(run, node))
        await asyncio.sleep(1.0)
        assert not joining.done()
        os.kill(runtime.workers[0].process.pid, signal.SIGKILL)
        with pytest.raises(BcdWorkerDied, match="exited with code -9"):
            await asyncio.wait_for(joining, 30)
        assert runtime.joining == 0
        with pytest.raises(BcdWorkerDied):
            await runtime(run, node)
    finally:
        await runtime.stop()
        runtime.close()


async def test_joins_beyond_the_cap_wait_their_turn_and_cancelling_ends_them_in_the_worker(tmp_path: Path) -> None:
    runtime = BcdWorkerRuntime(SimClock(), 2, root=tmp_path / "nodes", joins_at_once=1)
    await runtime.start()
    try:
        joins = []
        for n in range(2):
            run, node = pod(tmp_path, "join", UNREACHABLE_JOIN, TOKEN)
            joins.append(asyncio.create_task(runtime(dataclasses.replace(run, uid=f"uid-{n}"), node)))
        await asyncio.sleep(1.0)
        assert runtime.joining == 0, "the one in a worker sleeps out its back-off; the other waits its turn, uncounted"
        assert sum(w.load for w in runtime.workers) == 1, "one is in a worker, the other waits its turn"
        for join in joins:
            join.cancel()
        await asyncio.gather(*joins, return_exceptions=True)
        assert runtime.joining == 0
        assert sum(w.load for w in runtime.workers) == 0
        assert all(w.died is None for w in runtime.workers)
    finally:
        await runtime.stop()
        runtime.close()


async def test_an_in_process_join_waiting_out_its_back_off_is_not_counted_as_under_way(tmp_path: Path) -> None:
    """A harness holds simulated time while `joining` is not 0; a join asleep in its back-off on
    that clock would then wait for ever, so it leaves the count while it sleeps."""
    clock = SimClock()
    runtime = BcdPodRuntime(clock, root=tmp_path / "nodes")
    try:
        run, node = pod(tmp_path, "join", UNREACHABLE_JOIN, TOKEN)
        joining = asyncio.create_task(runtime(run, node))
        for _ in range(500):
            if clock.next_wakeup() is not None:
                break
            await asyncio.sleep(0.01)
        assert clock.next_wakeup() is not None, "the first attempt failed and the join sleeps on the clock"
        assert (runtime.joins, runtime.joining) == (1, 0)
        joining.cancel()
        await asyncio.gather(joining, return_exceptions=True)
        assert runtime.joining == 0
    finally:
        runtime.close()
