"""validate_substrate in GKE's vocabulary: every problem at once, each at its JSON pointer."""

from __future__ import annotations

from typing import Any

from gke_world import account

from better_compute.core.errors import Problem
from better_compute.kubernetes.provider import GpuInfo
from better_compute.providers.gcp import GkeKubernetes

PATH = "/pools/0/policy/substrate"


def substrate(location: str = "us-central1", **flavor: Any) -> dict[str, Any]:
    base = {
        "name": "h100",
        "machineType": "a3-highgpu-8g",
        "nodes": 2,
        "gpus": {"type": "nvidia-h100-80gb", "count": 8},
    }
    return {
        "kind": "kubernetes",
        "account": "managed-k8s",
        "cluster": {"create": {"location": location}},
        "flavors": [{**base, **flavor}],
    }


async def problems(sub: dict[str, Any], config: dict[str, Any] | None = None) -> list[Problem]:
    driver = GkeKubernetes()
    try:
        return await driver.validate_substrate(
            account(config or {"projectId": "my-project", "zones": ["us-central1-a"]}), sub, path=PATH
        )
    finally:
        driver.close()


async def test_the_specs_gke_example_is_valid() -> None:
    assert await problems(substrate()) == []


async def test_a_zone_is_a_valid_location_too() -> None:
    assert await problems(substrate("us-central1-a")) == []


async def test_an_unknown_location_is_refused() -> None:
    assert await problems(substrate("us-east-1")) == [
        Problem(f"{PATH}/cluster/create/location", "'us-east-1' is neither a GKE region nor a GKE zone")
    ]


async def test_the_accelerator_must_match_the_machine_type() -> None:
    found = await problems(substrate(gpus={"type": "nvidia-h100-80gb", "count": 4}))
    assert found == [
        Problem(f"{PATH}/flavors/0/gpus", "a3-highgpu-8g carries 8 x nvidia-h100-80gb, not 4 x nvidia-h100-80gb")
    ]
    found = await problems(substrate(gpus={"type": "nvidia-h100", "count": 8}))
    assert [p.path for p in found] == [f"{PATH}/flavors/0/gpus/type"]


async def test_a_gpu_machine_type_must_say_its_gpus() -> None:
    found = await problems(substrate(gpus=None))
    assert found == [Problem(f"{PATH}/flavors/0/gpus", "a3-highgpu-8g carries 8 x nvidia-h100-80gb; say so in gpus")]


async def test_n1_takes_attachable_gpus_in_counts_of_1_2_4_8() -> None:
    assert await problems(substrate(machineType="n1-standard-8", gpus={"type": "nvidia-tesla-t4", "count": 2})) == []
    found = await problems(substrate(machineType="n1-standard-8", gpus={"type": "nvidia-tesla-t4", "count": 3}))
    assert [p.path for p in found] == [f"{PATH}/flavors/0/gpus/count"]
    found = await problems(substrate(machineType="e2-standard-4", gpus={"type": "nvidia-tesla-t4", "count": 1}))
    assert [p.path for p in found] == [f"{PATH}/flavors/0/gpus"]


async def test_every_problem_is_reported_at_once() -> None:
    found = await problems(
        substrate(
            "us-central1",
            machineType="x9-huge",
            nodes=-1,
            zones=["us-central1-a", "us-east1-b", "moon-1a"],
            diskGiB=5,
            spot="yes",
        ),
        config={"zones": ["europe-west4-a"]},
    )
    assert [p.path for p in found] == [
        f"{PATH}/account/config/projectId",
        f"{PATH}/account/config/zones/0",
        f"{PATH}/flavors/0/machineType",
        f"{PATH}/flavors/0/nodes",
        f"{PATH}/flavors/0/zones/1",
        f"{PATH}/flavors/0/zones/2",
        f"{PATH}/flavors/0/diskGiB",
        f"{PATH}/flavors/0/spot",
    ]
    assert found[0].message == "a GKE provider account needs config.projectId"
    assert found[1].message == "the account's zone europe-west4-a is not in the cluster's region us-central1"
    assert found[4].message == "us-east1-b is not a zone of the cluster's region us-central1"


async def test_zero_nodes_spot_zones_and_disk_are_allowed() -> None:
    found = await problems(substrate(nodes=0, spot=True, zones=["us-central1-b"], diskGiB=500))
    assert found == []


async def test_an_adopt_id_is_location_slash_name() -> None:
    sub = substrate()
    sub["cluster"] = {"adopt": "us-central1/their-cluster"}
    assert await problems(sub) == []
    sub["cluster"] = {"adopt": "their-cluster"}
    assert [p.path for p in await problems(sub)] == [f"{PATH}/cluster/adopt"]


async def test_machine_gpus_reads_the_vocabulary() -> None:
    driver = GkeKubernetes()
    try:
        assert await driver.machine_gpus(account(), "a3-highgpu-8g") == GpuInfo("H100", 8, "nvidia-h100-80gb")
        assert await driver.machine_gpus(account(), "g2-standard-4") == GpuInfo("L4", 1, "nvidia-l4")
        assert await driver.machine_gpus(account(), "e2-standard-4") is None
    finally:
        driver.close()
