"""Finding clusters by name across pages and races, node pool sizing in place, and the driver's thread pool."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from doks_world import CANARY, World

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import Autoscaling, ClusterSpec, NodePoolSpec, NodePoolStatus
from better_compute.providers.digitalocean import driver as driver_module
from better_compute.providers.digitalocean.client import DoApi


async def test_a_cluster_on_a_later_page_is_found_not_made_again(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module, "PAGE_SIZE", 1)
    made = [await world.driver.ensure_cluster(world.account(), ClusterSpec(f"c{i}", "tor1")) for i in range(3)]
    again = await world.driver.ensure_cluster(world.account(), ClusterSpec("c2", "tor1"))
    assert again.cluster_id == made[2].cluster_id
    assert len(world.doks.clusters) == 3


async def test_two_racing_ensure_cluster_calls_make_one_cluster(world: World) -> None:
    spec = ClusterSpec("raced", "tor1")
    first, second = await asyncio.gather(
        world.driver.ensure_cluster(world.account(), spec), world.driver.ensure_cluster(world.account(), spec)
    )
    assert first.cluster_id == second.cluster_id
    assert [c.name for c in world.doks.clusters.values()] == ["raced"]


async def test_a_cluster_of_that_name_elsewhere_is_refused(world: World) -> None:
    await world.driver.ensure_cluster(world.account(regions=["tor1", "nyc3"]), ClusterSpec("here", "tor1"))
    with pytest.raises(ComputeError) as caught:
        await world.driver.ensure_cluster(world.account(regions=["tor1", "nyc3"]), ClusterSpec("here", "nyc3"))
    assert caught.value.code == ErrorCode.INVALID_STATE
    with pytest.raises(ComputeError) as caught:
        await world.driver.ensure_cluster(world.account(), ClusterSpec("there", "us-east-1"))
    assert (caught.value.code, caught.value.path) == (ErrorCode.INVALID_INPUT, "/location")


async def test_resizing_keeps_labels_and_switches_autoscaling_in_place(world: World) -> None:
    state = await world.driver.ensure_cluster(world.account(), ClusterSpec("sized", "tor1"))
    cid = state.cluster_id
    await world.advance(world.doks.timings.cluster_provisioning)
    spec = NodePoolSpec("work", "s-2vcpu-4gb", 2, labels={"better-compute.dev/substrate-pool": "pool_1"})
    made = await world.driver.ensure_node_pool(world.account(), cid, spec)
    pool_id = world.doks.clusters[cid].pools[-1].id
    scaled = await world.driver.resize_node_pool(world.account(), cid, "work", 0, Autoscaling(0, 4))
    assert (scaled.node_count, scaled.autoscaling) == (2, Autoscaling(0, 4)), "only the bounds: the count stays"
    assert scaled.labels == made.labels
    lowered = await world.driver.resize_node_pool(world.account(), cid, "work", 0, Autoscaling(0, 1))
    assert (lowered.node_count, lowered.autoscaling) == (1, Autoscaling(0, 1)), "moved to the new maximum"
    fixed = await world.driver.resize_node_pool(world.account(), cid, "work", 3)
    assert (fixed.node_count, fixed.autoscaling) == (3, None)
    await world.advance(world.doks.timings.node_provisioning)
    after = await world.driver.get_node_pool(world.account(), cid, "work")
    assert after is not None and after.status == NodePoolStatus.READY and after.node_count == 3
    assert world.doks.clusters[cid].pools[-1].id == pool_id, "resized in place, not replaced"
    with pytest.raises(ComputeError) as caught:
        await world.driver.resize_node_pool(world.account(), cid, "work", 0)
    assert (caught.value.code, caught.value.path) == (ErrorCode.INVALID_INPUT, "/nodeCount")
    with pytest.raises(ComputeError) as caught:
        await world.driver.resize_node_pool(world.account(), cid, "absent", 1)
    assert caught.value.code == ErrorCode.NOT_FOUND


async def test_pydo_calls_run_in_the_drivers_own_bounded_pool() -> None:
    api = DoApi("http://127.0.0.1:9", max_workers=2)
    lock = threading.Lock()
    running: list[int] = [0]
    peak: list[int] = [0]

    def operation(k: Any, kw: dict[str, Any]) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        assert kw["enforce_https"] is False, "plain HTTP only to a loopback endpoint"
        return threading.current_thread().name

    try:
        names = await asyncio.gather(*(api.call(CANARY, operation) for _ in range(6)))
    finally:
        api.close()
    assert all(name.startswith("bc-doks") for name in names)
    assert peak[0] <= 2


def test_plain_http_is_refused_away_from_loopback() -> None:
    with pytest.raises(ValueError, match="HTTPS"):
        DoApi("http://api.example.com")


def test_the_public_surface_is_decided() -> None:
    import better_compute.providers.digitalocean as provider
    import better_compute.testing.doks as emulator

    assert sorted(provider.__all__) == ["DoksAccountConfig", "DoksKubernetes", "VOCABULARY", "digitalocean_provider"]
    assert sorted(emulator.__all__) == ["DoksEmulator", "DoksFaults", "Timings"]
    for module in (provider, emulator):
        assert all(hasattr(module, name) for name in module.__all__)
