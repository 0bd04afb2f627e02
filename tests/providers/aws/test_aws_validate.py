"""`validate_substrate` on EKS: regional clusters, the instance type's GPUs read from
EC2, zones of the account, disks without a type, every problem with its path."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator
from better_compute.vps.provider import ProviderAccount

PATH = "/pools/0/policy/substrate"


def substrate(**flavor: Any) -> dict[str, Any]:
    base = {"name": "h100", "machineType": "p5.48xlarge", "nodes": 2, "gpus": {"type": "nvidia-h100", "count": 8}}
    base.update(flavor)
    return {
        "kind": "kubernetes",
        "account": "managed-k8s",
        "cluster": {"create": {"location": "us-east-1"}},
        "flavors": [base],
    }


async def problems(driver: EksKubernetes, account: ProviderAccount, body: dict[str, Any]) -> dict[str, str]:
    return {p.path: p.message for p in await driver.validate_substrate(account, body, path=PATH)}


async def test_the_spec_example_is_valid(eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount) -> None:
    assert await problems(driver, account, substrate()) == {}
    assert await problems(driver, account, substrate(spot=True, diskGiB=500, zones=["us-east-1b"], nodes=0)) == {}


async def test_a_zone_is_refused_as_the_cluster_location(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    body = substrate()
    body["cluster"] = {"create": {"location": "us-east-1a"}}
    found = await problems(driver, account, body)
    assert list(found) == [f"{PATH}/cluster/create/location"]
    assert "regional" in found[f"{PATH}/cluster/create/location"]
    assert "us-east-1" in found[f"{PATH}/cluster/create/location"]
    body["cluster"] = {"create": {"location": "eu-west-1"}}
    assert list(await problems(driver, account, body)) == [f"{PATH}/cluster/create/location"]


async def test_the_accelerator_must_match_the_instance_types_gpus(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    wrong_type = await problems(driver, account, substrate(gpus={"type": "nvidia-a100", "count": 8}))
    assert list(wrong_type) == [f"{PATH}/flavors/0/gpus"]
    assert "8 x nvidia-h100" in wrong_type[f"{PATH}/flavors/0/gpus"]
    wrong_count = await problems(
        driver, account, substrate(machineType="g6.xlarge", gpus={"type": "nvidia-l4", "count": 8})
    )
    assert list(wrong_count) == [f"{PATH}/flavors/0/gpus"]
    no_gpus = await problems(driver, account, substrate(machineType="m7i.large"))
    assert "no GPUs" in no_gpus[f"{PATH}/flavors/0/gpus"]
    for machine, gpus in (
        ("p5e.48xlarge", ("nvidia-h200", 8)),
        ("p4d.24xlarge", ("nvidia-a100", 8)),
        ("g5.xlarge", ("nvidia-a10g", 1)),
    ):
        body = substrate(machineType=machine, gpus={"type": gpus[0], "count": gpus[1]})
        assert await problems(driver, account, body) == {}
    unknown = await problems(driver, account, substrate(machineType="x9.huge"))
    assert list(unknown) == [f"{PATH}/flavors/0/machineType"]


async def test_every_problem_of_a_flavor_is_reported_at_once(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    found = await problems(
        driver, account, substrate(nodes=-1, zones=["us-east-1a", "us-west-2a"], diskType="gp3", diskGiB=0)
    )
    assert set(found) == {
        f"{PATH}/flavors/0/nodes",
        f"{PATH}/flavors/0/zones/1",
        f"{PATH}/flavors/0/diskType",
        f"{PATH}/flavors/0/diskGiB",
    }


async def test_the_account_and_the_adopt_id_are_checked(eks: EksEmulator, driver: EksKubernetes) -> None:
    bad = ProviderAccount(
        name="a", provider="aws", tenant_id="t", config={"region": "us-east-1", "zones": ["us-west-2a"]}
    )
    body = substrate()
    body["cluster"] = {"adopt": "theirs"}
    found = await driver.validate_substrate(bad, body, path=PATH)
    assert f"{PATH}/cluster/adopt" in {p.path for p in found}
    about_account = {p.path: p.message for p in found if p.path.startswith(f"{PATH}/account/config/")}
    assert "eksSubnetIds" in about_account[f"{PATH}/account/config/eksSubnetIds"]
    assert "us-west-2a" in about_account[f"{PATH}/account/config/zones/0"]
    body["cluster"] = {"adopt": "us-east-1a/theirs"}
    assert "regional" in (await problems(driver, bad, body))[f"{PATH}/cluster/adopt"]


@pytest.mark.parametrize("location", ["us-east-1a", "not-a-region"])
async def test_ensure_cluster_refuses_a_zone(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, location: str
) -> None:
    from better_compute.core.errors import ComputeError, ErrorCode
    from better_compute.kubernetes.provider import ClusterSpec

    with pytest.raises(ComputeError) as caught:
        await driver.ensure_cluster(account, ClusterSpec("c", location))
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert eks.cluster("c") is None


async def test_the_accounts_zones_must_be_its_subnets_zones(eks: EksEmulator, driver: EksKubernetes) -> None:
    config = {
        "region": "us-east-1",
        "zones": ["us-east-1a", "us-east-1c"],
        "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
        "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
        "eksSubnetIds": ["subnet-0000000000000000a", "subnet-0000000000000000b"],
    }
    account = ProviderAccount(name="a", provider="aws", tenant_id="t", config=config)
    found = await problems(driver, account, substrate())
    assert "['us-east-1a', 'us-east-1b']" in found[f"{PATH}/account/config/eksSubnetIds"]
    unknown = ProviderAccount(
        name="a", provider="aws", tenant_id="t", config={**config, "eksSubnetIds": ["subnet-does-not-exist"]}
    )
    assert (
        "does not know the subnets"
        in (await problems(driver, unknown, substrate()))[f"{PATH}/account/config/eksSubnetIds"]
    )
