"""The DOKS driver's rules and error mapping, against the DOKS emulator through pydo."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from doks_world import World

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import (
    Accelerators,
    Autoscaling,
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NodePoolSpec,
    NodePoolStatus,
    Taint,
)
from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.providers.digitalocean.driver import DoksKubernetes
from better_compute.providers.digitalocean.vocabulary import DEVICE_PLUGIN_ON

GPU = NodePoolSpec("gpus", "gpu-h100x8-640gb", 1, accelerators=Accelerators("nvidia-h100", 8))
CPU = NodePoolSpec("cpus", "s-2vcpu-4gb", 1)


async def _ready(world: World, name: str = "c1", **spec: Any) -> ClusterState:
    state = await world.driver.ensure_cluster(world.account(), ClusterSpec(name, "tor1", **spec))
    await world.advance(world.doks.timings.cluster_provisioning + world.doks.timings.node_provisioning)
    ready = await world.driver.get_cluster(world.account(), state.cluster_id)
    assert ready is not None and ready.status == ClusterStatus.READY
    return ready


async def _refusal(call: Any) -> ComputeError:
    with pytest.raises(ComputeError) as caught:
        await call
    return caught.value


async def test_a_created_cluster_has_the_gpu_device_plugins_off_and_a_system_pool(world: World) -> None:
    state = await _ready(world)
    made = world.doks.clusters[state.cluster_id]
    assert (made.nvidia_gpu_device_plugin, made.amd_gpu_device_plugin) == (False, False)
    assert state.node_pools == ("bc-system",)
    assert state.outputs is not None and state.outputs.global_id == state.cluster_id
    assert state.outputs.endpoint == made.kube.endpoint
    pool = await world.driver.ensure_node_pool(world.account(), state.cluster_id, GPU)
    assert pool.accelerators == Accelerators("nvidia-h100", 8)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (NodePoolSpec("z", "s-2vcpu-4gb", 1, zones=("tor1-a",)), "/zones"),
        (NodePoolSpec("d", "s-2vcpu-4gb", 1, disk_gib=100), "/diskGiB"),
        (NodePoolSpec("n", "s-2vcpu-4gb", 0), "/nodeCount"),
        (NodePoolSpec("n", "s-2vcpu-4gb", 0, autoscaling=Autoscaling(1, 3)), "/nodeCount"),
        (NodePoolSpec("s", "s-2vcpu-4gb", 1, spot=True), "/spot"),
        (NodePoolSpec("g", "gpu-h100x8-640gb", 1, accelerators=Accelerators("nvidia-h100", 1)), "/accelerators"),
        (NodePoolSpec("u", "gpu-b300x8-2tb", 1), "/machineType"),
    ],
)
async def test_a_node_pool_against_doks_rules_is_refused_before_any_call(
    world: World, spec: NodePoolSpec, path: str
) -> None:
    before = len(world.doks.requests)
    error = await _refusal(world.driver.ensure_node_pool(world.account(), str(uuid.uuid4()), spec))
    assert (error.code, error.path) == (ErrorCode.INVALID_INPUT, path)
    assert len(world.doks.requests) == before


async def test_labels_and_taints_reach_the_kubernetes_nodes_in_kubernetes_casing(world: World) -> None:
    cid = (await _ready(world)).cluster_id
    taints = (Taint("gpu", "true", "NO_SCHEDULE"), Taint("bc", "x", "PreferNoSchedule"))
    spec = NodePoolSpec("tainted", "s-2vcpu-4gb", 1, labels={"better-compute.dev/substrate-pool": "p1"}, taints=taints)
    await world.driver.ensure_node_pool(world.account(), cid, spec)
    await world.advance(world.doks.timings.node_provisioning)
    state = await world.driver.get_node_pool(world.account(), cid, "tainted")
    assert state is not None and state.status == NodePoolStatus.READY
    pool = world.doks.clusters[cid].pools[-1]
    node = world.doks.clusters[cid].kube.get_object("Node", pool.nodes[0].name)
    assert node is not None and node["metadata"]["name"].startswith("tainted-")
    assert node["metadata"]["labels"]["better-compute.dev/substrate-pool"] == "p1"
    assert node["metadata"]["labels"]["doks.digitalocean.com/node-pool"] == "tainted"
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        ("gpu", "NoSchedule"),
        ("bc", "PreferNoSchedule"),
    ]


async def test_zero_nodes_with_autoscaling_from_zero_and_spot_with_the_preview(world: World) -> None:
    cid = (await _ready(world)).cluster_id
    account = world.account(allowSpot=True, previews=["spot"])
    empty = NodePoolSpec("empty", "s-2vcpu-4gb", 0, autoscaling=Autoscaling(0, 3))
    state = await world.driver.ensure_node_pool(account, cid, empty)
    assert (state.node_count, state.status, state.autoscaling) == (0, NodePoolStatus.READY, Autoscaling(0, 3))
    spot = await world.driver.ensure_node_pool(account, cid, NodePoolSpec("spot", "s-2vcpu-4gb", 1, spot=True))
    assert spot.spot
    pools = {p.name: p for p in world.doks.clusters[cid].pools}
    assert pools["spot"].spot and "spot" in pools["spot"].tags, "the preview's tag: the API has no Spot field"
    assert not pools["empty"].spot


async def test_a_gpu_pool_is_refused_while_digitaloceans_device_plugins_are_on(world: World) -> None:
    own = {"name": "own", "size": "gpu-h100x1-80gb", "count": 1}
    adopted = await world.doks.seed_cluster(name="theirs", node_pools=(own,))
    state = await world.driver.read_adoptable(world.account(), adopted)
    assert state.status == ClusterStatus.READY and DEVICE_PLUGIN_ON in (state.message or "")
    error = await _refusal(world.driver.ensure_node_pool(world.account(), adopted, GPU))
    assert (error.code, error.reason) == (ErrorCode.INVALID_STATE, DEVICE_PLUGIN_ON)
    assert "nvidia_gpu_device_plugin" in error.message
    assert await world.driver.get_node_pool(world.account(), adopted, GPU.name) is None
    cpu = await world.driver.ensure_node_pool(world.account(), adopted, CPU)
    assert cpu.name == "cpus", "a node pool without GPUs is fine"
    amd = await world.doks.seed_cluster(
        name="amd", node_pools=(own,), nvidia_gpu_device_plugin=False, amd_gpu_device_plugin=True
    )
    error = await _refusal(world.driver.ensure_node_pool(world.account(), amd, GPU))
    assert error.reason == DEVICE_PLUGIN_ON and "amd_gpu_device_plugin" in error.message


async def test_read_adoptable_refuses_what_cannot_be_adopted(world: World) -> None:
    missing = await _refusal(world.driver.read_adoptable(world.account(), str(uuid.uuid4())))
    assert missing.code == ErrorCode.NOT_FOUND
    malformed = await _refusal(world.driver.read_adoptable(world.account(), "tor1/theirs"))
    assert malformed.code == ErrorCode.INVALID_INPUT
    cid = await world.doks.seed_cluster(name="doomed")
    await world.driver.delete_cluster(world.account(), cid)
    deleting = await _refusal(world.driver.read_adoptable(world.account(), cid))
    assert deleting.code == ErrorCode.INVALID_STATE


async def test_quota_and_stockout_keep_digitaloceans_message(world: World) -> None:
    cid = (await _ready(world)).cluster_id
    world.doks.faults.quota(2)
    quota = await _refusal(world.driver.ensure_node_pool(world.account(), cid, NodePoolSpec("big", "c-8", 2)))
    assert (quota.code, quota.reason) == (ErrorCode.UNAVAILABLE, "quotaExceeded")
    assert "exceed your droplet limit" in quota.message
    world.doks.faults.quota(None)
    world.doks.faults.stockout(GPU.machine_type)
    stockout = await _refusal(world.driver.ensure_node_pool(world.account(), cid, GPU))
    assert (stockout.code, stockout.reason) == (ErrorCode.UNAVAILABLE, "stockout")
    assert GPU.machine_type in stockout.message


async def test_a_refused_delete_is_invalid_state_with_the_providers_message(world: World) -> None:
    cid = (await _ready(world)).cluster_id
    world.doks.faults.refuse_delete(cid, "cluster has volumes attached that are in use")
    error = await _refusal(world.driver.delete_cluster(world.account(), cid))
    assert error.code == ErrorCode.INVALID_STATE and "volumes attached" in error.message
    world.doks.faults.refuse_delete(
        cid, "You are not authorized to perform this operation", status=403, error_id="forbidden"
    )
    denied = await _refusal(world.driver.delete_cluster(world.account(), cid))
    assert denied.code == ErrorCode.PERMISSION_DENIED and "not authorized" in denied.message
    world.doks.faults.allow_delete(cid)
    await world.driver.delete_cluster(world.account(), cid)
    await world.advance(world.doks.timings.cluster_deletion)
    assert await world.driver.get_cluster(world.account(), cid) is None
    await world.driver.delete_cluster(world.account(), cid)


async def test_throttling_is_unavailable_with_the_retry_after_of_the_answer(world: World) -> None:
    world.doks.limiter.per_minute = 2
    await world.driver.get_cluster(world.account(), str(uuid.uuid4()))
    await world.driver.get_cluster(world.account(), str(uuid.uuid4()))
    await world.advance(20)
    error = await _refusal(world.driver.get_cluster(world.account(), str(uuid.uuid4())))
    assert (error.code, error.reason, error.retry_after) == (ErrorCode.UNAVAILABLE, "throttled", 40.0)
    await world.advance(40)
    assert await world.driver.get_cluster(world.account(), str(uuid.uuid4())) is None


async def test_a_control_plane_that_never_answers_stays_provisioning_without_credentials(world: World) -> None:
    world.doks.faults.control_plane_never_answers()
    state = await world.driver.ensure_cluster(world.account(), ClusterSpec("stuck", "tor1"))
    await world.advance(6 * 3600)
    again = await world.driver.get_cluster(world.account(), state.cluster_id)
    assert again is not None and again.status == ClusterStatus.PROVISIONING and again.outputs is None
    error = await _refusal(world.driver.credentials(world.account(), state.cluster_id))
    assert error.code == ErrorCode.INVALID_STATE


async def test_a_reclaimed_spot_node_is_replaced_and_the_pool_is_ready_again(world: World) -> None:
    cid = (await _ready(world)).cluster_id
    account = world.account(allowSpot=True, previews=True)
    await world.driver.ensure_node_pool(account, cid, NodePoolSpec("spot", "s-2vcpu-4gb", 1, spot=True))
    await world.advance(world.doks.timings.node_provisioning)
    reclaimed = await world.doks.faults.reclaim_spot(cid)
    after = await world.driver.get_node_pool(account, cid, "spot")
    assert after is not None and after.status == NodePoolStatus.PROVISIONING
    assert world.doks.clusters[cid].kube.get_object("Node", reclaimed) is None
    await world.advance(world.doks.timings.node_provisioning)
    again = await world.driver.get_node_pool(account, cid, "spot")
    assert again is not None and again.status == NodePoolStatus.READY


async def test_an_upgrade_doks_does_not_offer_is_refused(world: World) -> None:
    cid = (await _ready(world, version="1.31")).cluster_id
    error = await _refusal(world.driver.upgrade_cluster(world.account(), cid, "1.33"))
    assert (error.code, error.path) == (ErrorCode.INVALID_INPUT, "/version")
    state = await world.driver.upgrade_cluster(world.account(), cid, "1.32")
    assert state.status == ClusterStatus.UPDATING
    same = await world.driver.upgrade_cluster(world.account(), cid, "1.32")
    assert same.status == ClusterStatus.UPDATING, "a second call while upgrading starts nothing new"


async def test_a_wrong_token_is_permission_denied_and_a_plain_token_is_never_sent(world: World) -> None:
    async def other(reference: str) -> str:
        return "dop_v1_revoked_token_00000000000000"

    account = world.account()
    revoked = type(account)(account.name, account.provider, account.tenant_id, account.config, resolve_secret=other)
    denied = await _refusal(world.driver.get_cluster(revoked, str(uuid.uuid4())))
    assert denied.code == ErrorCode.PERMISSION_DENIED
    before = len(world.doks.requests)
    plain = await _refusal(world.driver.get_cluster(world.account(token="dop_v1_plain"), str(uuid.uuid4())))
    assert (plain.code, plain.path) == (ErrorCode.INVALID_INPUT, "/config/token")
    assert len(world.doks.requests) == before


async def test_an_unreachable_api_is_unavailable(world: World) -> None:
    provider = digitalocean_provider(endpoint="http://127.0.0.1:9")
    driver = provider.kubernetes
    assert isinstance(driver, DoksKubernetes)
    try:
        error = await _refusal(driver.get_cluster(world.account(), str(uuid.uuid4())))
    finally:
        driver.close()
    assert error.code == ErrorCode.UNAVAILABLE


async def test_the_vocabulary(world: World) -> None:
    driver = world.driver
    assert driver.zone_count(world.account(), ("a", "b")) == 1
    gpus = await driver.machine_gpus(world.account(), "gpu-h100x8-640gb")
    assert gpus is not None and (gpus.model, gpus.count, gpus.accelerator_type) == ("H100", 8, "nvidia-h100")
    assert await driver.machine_gpus(world.account(), "s-2vcpu-4gb") is None
    vocabulary = driver.vocabulary
    assert (vocabulary.cluster_location, vocabulary.nodes_per_zone, vocabulary.zero_nodes) == ("region", False, False)
    assert (vocabulary.zones_and_disk, vocabulary.node_naming) == (False, "<node pool>-<suffix>")
