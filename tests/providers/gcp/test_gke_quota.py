"""GKE's GPU quota through Compute Engine's regions.get (google-cloud-compute, REST transport): the region's
`quotas[]` for the accelerators a plan adds, their usage counting the emulator's own GPU VMs."""

from __future__ import annotations

import pytest
from gke_world import PROJECT, Gke
from test_gke_rules import ready_cluster, ready_pool

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import Accelerators, NodePoolSpec, QuotaNeed

H100 = QuotaNeed("a3-highgpu-8g", 2, accelerators=Accelerators("nvidia-h100-80gb", 8))


async def test_the_region_quota_of_each_accelerator_with_its_usage_and_what_the_needs_add(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-a", name="quota")
    await ready_pool(
        gke,
        cluster_id,
        NodePoolSpec(name="l4", machine_type="g2-standard-4", node_count=3, accelerators=Accelerators("nvidia-l4", 1)),
    )
    gke.emulator.quotas.set("us-central1", "NVIDIA_H100_GPUS", limit=16, used_elsewhere=8)
    gke.emulator.quotas.set("us-central1", "NVIDIA_L4_GPUS", limit=4)
    needs = (H100, QuotaNeed("g2-standard-4", 2), QuotaNeed("a3-highgpu-8g", 1, spot=True), QuotaNeed("e2-small", 5))

    h100, l4, spot = await gke.driver.quotas(gke.account, "us-central1-a", needs)

    assert ("GET", f"compute/v1/projects/{PROJECT}/regions/us-central1") in gke.emulator.requests
    assert (h100.metric, h100.limit, h100.usage, h100.adds, h100.scope) == (
        "NVIDIA_H100_GPUS",
        16,
        8,
        16,
        "us-central1",
    )
    assert h100.exceeded and h100.name == "NVIDIA H100 GPUs" and h100.unit == "GPUs"
    assert (l4.metric, l4.usage, l4.adds, l4.exceeded) == ("NVIDIA_L4_GPUS", 3, 2, True), "3 L4 VMs run already"
    assert (spot.metric, spot.adds, spot.exceeded) == ("PREEMPTIBLE_NVIDIA_H100_GPUS", 8, False)
    assert await gke.driver.quotas(gke.account, "us-central1-a", (QuotaNeed("e2-small", 5),)) == (), "no GPU, no ask"


async def test_an_adopted_clusters_region_comes_from_its_id(gke: Gke) -> None:
    (quota,) = await gke.driver.quotas(gke.account, "europe-west4-b/theirs", (H100,))
    assert quota.scope == "europe-west4" and quota.limit == 64 and not quota.exceeded


@pytest.mark.parametrize(
    ("fault", "code", "message"),
    [
        ("compute_denied", ErrorCode.PERMISSION_DENIED, "Required 'compute.regions.get' permission"),
        ("compute_disabled", ErrorCode.PERMISSION_DENIED, "Compute Engine API has not been used in project"),
    ],
)
async def test_a_quota_that_cannot_be_read_is_a_compute_error(
    gke: Gke, fault: str, code: ErrorCode, message: str
) -> None:
    setattr(gke.emulator.faults, fault, True)
    with pytest.raises(ComputeError) as caught:
        await gke.driver.quotas(gke.account, "us-central1", (H100,))
    assert caught.value.code is code and message in str(caught.value)
