"""Every DOKS rule of the spec, as `validate_substrate` reports it: one problem per rule, at its JSON pointer."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.providers.digitalocean.driver import DoksKubernetes
from better_compute.vps.provider import ProviderAccount

PATH = "/pools/0/policy/substrate"
ACCOUNT = f"{PATH}/account"
GOOD_CONFIG: dict[str, Any] = {"token": "secret://tenant_a/sec_1", "regions": ["tor1"]}


def _substrate(*flavors: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "kubernetes",
        "account": "managed-k8s",
        "cluster": cluster or {"create": {"location": "tor1"}},
        "flavors": list(flavors)
        or [
            {"name": "h100", "machineType": "gpu-h100x8-640gb", "nodes": 2, "gpus": {"type": "nvidia-h100", "count": 8}}
        ],
    }


@pytest.fixture
def driver() -> DoksKubernetes:
    kubernetes = digitalocean_provider(endpoint="http://127.0.0.1:9").kubernetes
    assert isinstance(kubernetes, DoksKubernetes)
    return kubernetes


async def _problems(driver: DoksKubernetes, substrate: dict[str, Any], **config: Any) -> dict[str, str]:
    account = ProviderAccount("managed-k8s", "digitalocean", "tenant_a", {**GOOD_CONFIG, **config})
    found = await driver.validate_substrate(account, substrate, path=PATH)
    return {p.path: p.message for p in found}


async def test_the_spec_example_is_valid(driver: DoksKubernetes) -> None:
    assert await _problems(driver, _substrate()) == {}


@pytest.mark.parametrize(
    ("size", "gpus"),
    [
        ("gpu-h100x8-640gb", {"type": "nvidia-h100", "count": 8}),
        ("gpu-h100x1-80gb", {"type": "nvidia-h100", "count": 1}),
        ("gpu-l40sx1-48gb", {"type": "nvidia-l40s", "count": 1}),
        ("gpu-mi300x1-192gb", {"type": "amd-mi300x", "count": 1}),
    ],
)
async def test_a_gpu_size_matches_its_accelerator(driver: DoksKubernetes, size: str, gpus: dict[str, Any]) -> None:
    assert await _problems(driver, _substrate({"name": "f", "machineType": size, "nodes": 1, "gpus": gpus})) == {}


@pytest.mark.parametrize(
    "gpus",
    [{"type": "nvidia-h100", "count": 1}, {"type": "nvidia-a100", "count": 8}, None],
)
async def test_an_accelerator_that_does_not_match_the_size_is_refused(
    driver: DoksKubernetes, gpus: dict[str, Any] | None
) -> None:
    flavor: dict[str, Any] = {"name": "f", "machineType": "gpu-h100x8-640gb", "nodes": 1}
    if gpus is not None:
        flavor["gpus"] = gpus
    problems = await _problems(driver, _substrate(flavor))
    assert list(problems) == [f"{PATH}/flavors/0/gpus"]
    assert "8 x nvidia-h100" in problems[f"{PATH}/flavors/0/gpus"]


async def test_gpus_on_a_size_without_gpus_or_an_unknown_gpu_size_are_refused(driver: DoksKubernetes) -> None:
    problems = await _problems(
        driver,
        _substrate(
            {"name": "a", "machineType": "s-4vcpu-8gb", "nodes": 1, "gpus": {"type": "nvidia-h100", "count": 1}},
            {"name": "b", "machineType": "gpu-b300x8-2tb", "nodes": 1, "gpus": {"type": "nvidia-b300", "count": 8}},
            {"name": "c", "machineType": "s-4vcpu-8gb", "nodes": 1},
        ),
    )
    assert set(problems) == {f"{PATH}/flavors/0/machineType", f"{PATH}/flavors/1/machineType"}


async def test_zones_and_disk_are_refused(driver: DoksKubernetes) -> None:
    flavor = {"name": "c", "machineType": "s-4vcpu-8gb", "nodes": 1, "zones": ["tor1-a"], "diskGiB": 200}
    problems = await _problems(driver, _substrate(flavor))
    assert set(problems) == {f"{PATH}/flavors/0/zones", f"{PATH}/flavors/0/diskGiB"}


async def test_zero_nodes_needs_autoscaling_from_zero(driver: DoksKubernetes) -> None:
    fixed = {"name": "a", "machineType": "s-4vcpu-8gb", "nodes": 0}
    from_one = {**fixed, "name": "b", "autoscaling": {"minNodes": 1, "maxNodes": 3}}
    from_zero = {**fixed, "name": "c", "autoscaling": {"minNodes": 0, "maxNodes": 3}}
    problems = await _problems(driver, _substrate(fixed, from_one, from_zero))
    assert set(problems) == {f"{PATH}/flavors/0/nodes", f"{PATH}/flavors/1/nodes"}
    assert "minNodes: 0" in problems[f"{PATH}/flavors/0/nodes"]


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({}, True),
        ({"allowSpot": True}, True),
        ({"previews": True}, True),
        ({"allowSpot": True, "previews": ["other"]}, True),
        ({"allowSpot": True, "previews": True}, False),
        ({"allowSpot": True, "previews": ["spot"]}, False),
    ],
)
async def test_spot_is_a_preview_that_needs_allow_spot_and_previews(
    driver: DoksKubernetes, config: dict[str, Any], refused: bool
) -> None:
    flavor = {"name": "s", "machineType": "s-4vcpu-8gb", "nodes": 1, "spot": True}
    problems = await _problems(driver, _substrate(flavor), **config)
    assert (f"{PATH}/flavors/0/spot" in problems) is refused
    assert len(problems) == int(refused)


async def test_the_location_is_a_doks_region_of_the_account(driver: DoksKubernetes) -> None:
    zone = await _problems(driver, _substrate(cluster={"create": {"location": "tor1-a"}}))
    assert list(zone) == [f"{PATH}/cluster/create/location"]
    elsewhere = await _problems(driver, _substrate(cluster={"create": {"location": "nyc3"}}))
    assert "account's regions" in elsewhere[f"{PATH}/cluster/create/location"]


async def test_an_adopted_cluster_is_named_by_its_uuid(driver: DoksKubernetes) -> None:
    ok = await _problems(driver, _substrate(cluster={"adopt": "2f0b4a52-8a5e-4b0e-9c55-6d1f3e4a7b21"}))
    assert ok == {}
    bad = await _problems(driver, _substrate(cluster={"adopt": "tor1/my-cluster"}))
    assert list(bad) == [f"{PATH}/cluster/adopt"]


async def test_the_token_must_be_a_secret_reference(driver: DoksKubernetes) -> None:
    plain = await _problems(driver, _substrate(), token="dop_v1_plainplainplain")
    assert list(plain) == [f"{ACCOUNT}/config/token"]
    assert "dop_v1_plainplainplain" not in plain[f"{ACCOUNT}/config/token"]
    missing = await _problems(driver, _substrate(), token=None)
    assert "secret://" in missing[f"{ACCOUNT}/config/token"]


async def test_account_regions_must_be_doks_regions(driver: DoksKubernetes) -> None:
    problems = await _problems(driver, _substrate(), regions=["tor1", "us-east-1"])
    assert list(problems) == [f"{ACCOUNT}/config/regions/1"]
