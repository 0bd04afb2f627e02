"""The provider rules again, through the real GKE, EKS and DOKS drivers against their emulators."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fleet_documents import DELETE, SUBSTRATE, TENANT, edit, example
from fleet_store import harness

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet.plan import Action
from better_compute.fleet.validate import validate_document
from better_compute.store import Database
from better_compute.testing import Cloud
from better_compute.vps.provider import ProviderImpl


@pytest.fixture
async def drivers(clock: SimClock) -> AsyncIterator[dict[str, ProviderImpl]]:
    async with Cloud(clock) as cloud:
        yield {impl.name: impl for impl in cloud.providers()}


async def problems(document: Any, providers: dict[str, ProviderImpl]) -> dict[str, str]:
    with pytest.raises(ComputeError) as caught:
        await validate_document(document, tenant_id=TENANT, providers=providers)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    return {p.path: p.message for p in caught.value.problems}


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_spec_examples_pass_the_real_drivers(provider: str, drivers: dict[str, ProviderImpl]) -> None:
    document = await validate_document(example(provider), tenant_id=TENANT, providers=drivers)
    assert document.pools[0].name == "gpu-fleet"


REAL_RULES: list[tuple[str, str, Any, str, str]] = [
    ("eks", f"{SUBSTRATE}/cluster/create/location", "us-east-1a", f"{SUBSTRATE}/cluster/create/location", "regional"),
    ("eks", f"{SUBSTRATE}/flavors/0/gpus/type", "nvidia-l4", f"{SUBSTRATE}/flavors/0/gpus", "8 x nvidia-h100"),
    ("gke", f"{SUBSTRATE}/flavors/0/gpus/count", 4, f"{SUBSTRATE}/flavors/0/gpus", "8 x nvidia-h100-80gb"),
    ("doks", f"{SUBSTRATE}/flavors/0/gpus", DELETE, f"{SUBSTRATE}/flavors/0/gpus", "8 x nvidia-h100"),
    ("doks", "/providerAccounts/0/config/token", "dop_v1_abc", "/providerAccounts/0/config/token", "secret://"),
    ("doks", f"{SUBSTRATE}/flavors/0/nodes", 0, f"{SUBSTRATE}/flavors/0/nodes", "at least one node"),
    ("doks", f"{SUBSTRATE}/flavors/0/zones", ["tor1-a"], f"{SUBSTRATE}/flavors/0/zones", "no zones"),
    ("doks", f"{SUBSTRATE}/flavors/0/diskGiB", 200, f"{SUBSTRATE}/flavors/0/diskGiB", "disk"),
    ("doks", f"{SUBSTRATE}/flavors/0/spot", True, f"{SUBSTRATE}/flavors/0/spot", "allowSpot"),
]


@pytest.mark.parametrize(("provider", "path", "value", "where", "says"), REAL_RULES)
async def test_every_provider_rule_is_refused_by_the_real_driver(
    provider: str, path: str, value: Any, where: str, says: str, drivers: dict[str, ProviderImpl]
) -> None:
    found = await problems(edit(example(provider), path, value), drivers)
    assert where in found, found
    assert says in found[where]
    assert "dop_v1_abc" not in str(found), "a plain token never comes back in a message"


async def test_doks_takes_zero_nodes_with_autoscaling_and_spot_with_previews(drivers: dict[str, ProviderImpl]) -> None:
    document = edit(example("doks"), f"{SUBSTRATE}/flavors/0/nodes", 0)
    document = edit(document, f"{SUBSTRATE}/flavors/0/autoscaling", {"minNodes": 0, "maxNodes": 2})
    document = edit(document, f"{SUBSTRATE}/flavors/0/spot", True)
    document = edit(document, "/providerAccounts/0/config/allowSpot", True)
    document = edit(document, "/providerAccounts/0/config/previews", True)
    await validate_document(document, tenant_id=TENANT, providers=drivers)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_apply_resize_and_identity_change_with_the_real_drivers(
    provider: str, database: Database, clock: SimClock, drivers: dict[str, ProviderImpl]
) -> None:
    h = await harness(database, clock, providers=drivers)
    document = example(provider, tenant_id=h.tenant_id)
    second = dict(document["providerAccounts"][0], name="elsewhere")
    document = edit(document, "/providerAccounts/1", second)
    await h.fleet.apply(document, tenant_id=h.tenant_id)
    resized = await h.fleet.apply(edit(document, f"{SUBSTRATE}/flavors/0/nodes", 1), tenant_id=h.tenant_id)
    assert resized.item("pool", "gpu-fleet").action is Action.UPDATE
    rows = await h.snapshot_rows()
    moved = edit(document, f"{SUBSTRATE}/account", "elsewhere")
    assert (await h.fleet.plan(moved, tenant_id=h.tenant_id)).item("pool", "gpu-fleet").action is Action.BLOCKED
    with pytest.raises(ComputeError) as caught:
        await h.fleet.apply(moved, tenant_id=h.tenant_id)
    assert caught.value.code is ErrorCode.INVALID_STATE
    assert await h.snapshot_rows() == rows


ACCOUNT = "/providerAccounts/0/config"
TYPED_CONFIGS: list[tuple[str, str, Any, str, str]] = [
    ("eks", f"{ACCOUNT}/zones", 5, f"{ACCOUNT}/zones", "valid list"),
    ("eks", f"{ACCOUNT}/zones", [["us-east-1a"]], f"{ACCOUNT}/zones/0", "valid string"),
    ("eks", f"{ACCOUNT}/eksSubnetIds", 5, f"{ACCOUNT}/eksSubnetIds", "valid list"),
    ("eks", f"{ACCOUNT}/region", "us_east_1", f"{ACCOUNT}/region", "not an AWS region"),
    ("eks", f"{ACCOUNT}/region", "xx-nowhere-9", f"{ACCOUNT}/region", "not an AWS region"),
    ("eks", f"{ACCOUNT}/zones", ["us-west-2a"], f"{ACCOUNT}/zones/0", "not an Availability Zone of us-east-1"),
    ("eks", f"{ACCOUNT}/auth", {"token": "AKIA-plaintext"}, f"{ACCOUNT}/auth", "unknown key"),
    ("doks", f"{ACCOUNT}/regions", [["tor1"]], f"{ACCOUNT}/regions/0", "valid string"),
    ("doks", f"{ACCOUNT}/regions", ["mars1"], f"{ACCOUNT}/regions/0", "not a DOKS region"),
    ("doks", f"{ACCOUNT}/doTokenValue", "dop_v1_plaintext", f"{ACCOUNT}/doTokenValue", "unknown key"),
    ("doks", f"{ACCOUNT}/tokens", ["dop_v1_plaintext"], f"{ACCOUNT}/tokens", "unknown key"),
    ("doks", f"{ACCOUNT}/allowSpot", "yes", f"{ACCOUNT}/allowSpot", "valid boolean"),
    ("gke", f"{ACCOUNT}/zones", "us-central1-a", f"{ACCOUNT}/zones", "valid list"),
    ("gke", f"{ACCOUNT}/zones", ["us-central9-z"], f"{ACCOUNT}/zones/0", "not a GKE zone"),
    ("gke", f"{ACCOUNT}/projectId", 5, f"{ACCOUNT}/projectId", "valid string"),
    ("gke", f"{ACCOUNT}/serviceAccount", "me@gmail.com", f"{ACCOUNT}/serviceAccount", "expected form"),
    ("gke", f"{ACCOUNT}/pat", "ghp_plaintext", f"{ACCOUNT}/pat", "unknown key"),
]


async def test_each_provider_types_its_account_config(drivers: dict[str, ProviderImpl]) -> None:
    """One emulated cloud for every case (each is a pure refusal): wrong types, unknown places, pasted secrets."""
    for provider, path, value, where, says in TYPED_CONFIGS:
        found = await problems(edit(example(provider), path, value), drivers)
        assert where in found, (path, value, found)
        assert says in found[where], (path, value, found)
        assert "plaintext" not in str(found), "a value pasted into a config never comes back in a message"
    found = await problems(edit(example("eks"), f"{ACCOUNT}/zones", ["us-east-1a", "us-east-1c"]), drivers)
    assert list(found) == [f"{ACCOUNT}/eksSubnetIds"]
    assert "us-east-1b" in found[f"{ACCOUNT}/eksSubnetIds"]


NODE_COUNTS: list[tuple[str, Any, str, int]] = [
    ("gke", None, "nodes: 2 per zone x 1 zone = 2", 2),  # the account's one zone
    ("gke", DELETE, "nodes: 2 per zone x 3 zones = 6", 6),  # a regional cluster's default node zones
    ("eks", None, "nodes: 2 per zone x 2 zones = 4", 4),  # two subnets in two Availability Zones
    ("doks", None, "nodes: 2 in total", 2),
]


@pytest.mark.parametrize(("provider", "zones", "says", "total"), NODE_COUNTS)
async def test_the_plan_says_how_many_nodes_each_flavor_really_gets(
    provider: str,
    zones: Any,
    says: str,
    total: int,
    database: Database,
    clock: SimClock,
    drivers: dict[str, ProviderImpl],
) -> None:
    from rich.console import Console

    from better_compute.fleet.render import render_plan

    h = await harness(database, clock, providers=drivers)
    document = example(provider, tenant_id=h.tenant_id)
    if zones is not None:
        document = edit(document, f"{ACCOUNT}/zones", zones)
    plan = await h.fleet.plan(document, tenant_id=h.tenant_id)
    (counted,) = plan.to_dict()["nodeCounts"]
    assert (counted["pool"], counted["flavor"], counted["nodes"], counted["total"]) == ("gpu-fleet", "h100", 2, total)
    assert counted["perZone"] is (provider != "doks")
    console = Console(width=200, record=True)
    console.print(render_plan(plan))
    assert f"gpu-fleet/h100 ({counted['provider']})  {says}" in console.export_text()
    applied = await h.fleet.apply(document, tenant_id=h.tenant_id)
    assert applied.node_counts == plan.node_counts
