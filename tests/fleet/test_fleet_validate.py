"""Validation: the examples pass; every problem is reported at once, each at its JSON pointer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fleet_documents import DELETE, SUBSTRATE, TENANT, edit, example
from fleet_stub import StubKubernetes, stub_providers

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet.schema import json_schema
from better_compute.fleet.validate import validate_document


async def problems(document: Any, tenant_id: str = TENANT) -> dict[str, str]:
    with pytest.raises(ComputeError) as caught:
        await validate_document(document, tenant_id=tenant_id, providers=stub_providers())
    assert caught.value.code is ErrorCode.INVALID_INPUT
    return {p.path: p.message for p in caught.value.problems}


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_spec_examples_validate_and_reach_their_provider_hook(provider: str) -> None:
    providers = stub_providers()
    document = await validate_document(example(provider), tenant_id=TENANT, providers=providers)
    assert document.pools[0].policy.substrate is not None
    assert document.pools[0].policy.substrate.flavors[0].nodes == 2
    hook = providers[document.provider_accounts[0].provider].kubernetes
    assert isinstance(hook, StubKubernetes) and hook.calls == 1


async def test_unknown_keys_are_refused_everywhere_at_their_path() -> None:
    document = edit(example("eks"), "/extra", 1)
    document = edit(document, "/sites/0/zone", "a")
    document = edit(document, f"{SUBSTRATE}/flavors/0/gpu", {})
    document = edit(document, f"{SUBSTRATE}/cluster/create/zone", "us-east-1a")
    found = await problems(document)
    assert found == {
        "/extra": "unknown key",
        "/sites/0/zone": "unknown key",
        f"{SUBSTRATE}/flavors/0/gpu": "unknown key",
        f"{SUBSTRATE}/cluster/create/zone": "unknown key",
    }


async def test_values_are_never_coerced() -> None:
    found = await problems(edit(example("gke"), f"{SUBSTRATE}/flavors/0/nodes", "2"))
    assert list(found) == [f"{SUBSTRATE}/flavors/0/nodes"]
    found = await problems(edit(example("gke"), "/version", True))
    assert list(found) == ["/version"]


async def test_every_problem_is_reported_at_once() -> None:
    document = example("gke")
    document = edit(document, "/pools/0/site", "nowhere")
    document = edit(document, f"{SUBSTRATE}/account", "nobody")
    document = edit(document, f"{SUBSTRATE}/flavors/0/nodes", -1)
    document = edit(document, "/sites/0/name", "Not A Name")
    found = await problems(document)
    assert found == {
        "/pools/0/site": "no site named 'nowhere' in /sites",
        f"{SUBSTRATE}/account": "no provider account named 'nobody' in /providerAccounts",
        f"{SUBSTRATE}/flavors/0/nodes": "Input should be greater than or equal to 0",
        "/sites/0/name": "must be lower-case letters, digits and '-', at most 63 characters, "
        "starting and ending with a letter or digit",
    }


async def test_names_are_unique_per_section_and_flavors_per_substrate() -> None:
    document = example("gke")
    document["sites"].append(dict(document["sites"][0]))
    document["providerAccounts"].append(dict(document["providerAccounts"][0]))
    document["pools"].append(json.loads(json.dumps(document["pools"][0])))
    flavors = document["pools"][0]["policy"]["substrate"]["flavors"]
    flavors.append(dict(flavors[0]))
    found = await problems(document)
    assert found == {
        "/sites/1/name": "site 'k8s' is named twice (first at /sites/0)",
        "/providerAccounts/1/name": "provider account 'managed-k8s' is named twice (first at /providerAccounts/0)",
        "/pools/1/name": "pool 'gpu-fleet' is named twice (first at /pools/0)",
        f"{SUBSTRATE}/flavors/1/name": f"flavor 'h100' is named twice (first at {SUBSTRATE}/flavors/0)",
    }


async def test_a_provider_without_definition_is_refused_at_the_account() -> None:
    found = await problems(edit(example("gke"), "/providerAccounts/0/provider", "azure"))
    assert found == {
        "/providerAccounts/0/provider": "no provider definition named 'azure' is configured (known: aws, digitalocean, gcp)"
    }


async def test_cluster_is_create_or_adopt_and_one_cluster_backs_one_pool() -> None:
    both = edit(example("gke"), f"{SUBSTRATE}/cluster/adopt", "us-central1/c1")
    assert await problems(both) == {f"{SUBSTRATE}/cluster": "give exactly one of `create` or `adopt`"}
    adopt = edit(example("gke"), f"{SUBSTRATE}/cluster", {"adopt": "us-central1/c1"})
    second = json.loads(json.dumps(adopt["pools"][0]))
    second["name"] = "gpu-fleet-2"
    adopt["pools"].append(second)
    assert await problems(adopt) == {
        "/pools/1/policy/substrate/cluster/adopt": "cluster 'us-central1/c1' is already adopted by pool 'gpu-fleet': "
        "one cluster backs one pool"
    }


async def test_sizing_rules_of_the_schema() -> None:
    flavor = f"{SUBSTRATE}/flavors/0"
    found = await problems(edit(example("gke"), f"{flavor}/autoscaling", {"minNodes": 3, "maxNodes": 1}))
    assert found == {f"{flavor}/autoscaling": "minNodes is greater than maxNodes"}
    found = await problems(edit(example("gke"), f"{flavor}/autoscaling", {"minNodes": 3, "maxNodes": 5}))
    assert found == {flavor: "nodes must lie between autoscaling.minNodes and autoscaling.maxNodes"}
    found = await problems(edit(example("gke"), f"{flavor}/labels", {"bc.dev/capacity": "spot"}))
    assert found == {flavor: "labels bc.dev/capacity use a prefix the system sets itself"}
    found = await problems(edit(example("gke"), f"{SUBSTRATE}/flavors", []))
    assert list(found) == [f"{SUBSTRATE}/flavors"]


async def test_a_secret_in_an_account_is_a_reference_of_the_own_tenant() -> None:
    plain = edit(example("doks"), "/providerAccounts/0/config/token", "dop_v1_plainvalue")
    found = await problems(plain)
    assert found["/providerAccounts/0/config/token"] == (
        "a secret is given as a secret://<tenant>/<id> reference, never as a value"
    )
    assert "dop_v1_plainvalue" not in json.dumps(found)
    other = await problems(example("doks", tenant_id="ten_other"))
    assert other["/providerAccounts/0/config/token"] == "the secret reference belongs to another tenant"


# Provider rules, through the stub hook: each one refused at its path.

PROVIDER_RULES: list[tuple[str, str, Any, str]] = [
    ("eks", f"{SUBSTRATE}/cluster/create/location", "us-east-1a", f"{SUBSTRATE}/cluster/create/location"),
    ("eks", f"{SUBSTRATE}/flavors/0/gpus/type", "nvidia-l4", f"{SUBSTRATE}/flavors/0/gpus"),
    ("gke", f"{SUBSTRATE}/flavors/0/gpus/count", 4, f"{SUBSTRATE}/flavors/0/gpus"),
    ("doks", f"{SUBSTRATE}/flavors/0/gpus", DELETE, f"{SUBSTRATE}/flavors/0/gpus"),
    ("doks", "/providerAccounts/0/config/token", "dop_v1_abc", f"{SUBSTRATE}/account"),
    ("doks", f"{SUBSTRATE}/flavors/0/nodes", 0, f"{SUBSTRATE}/flavors/0/nodes"),
    ("doks", f"{SUBSTRATE}/flavors/0/zones", ["tor1-a"], f"{SUBSTRATE}/flavors/0/zones"),
    ("doks", f"{SUBSTRATE}/flavors/0/diskGiB", 200, f"{SUBSTRATE}/flavors/0/diskGiB"),
    ("doks", f"{SUBSTRATE}/flavors/0/spot", True, f"{SUBSTRATE}/flavors/0/spot"),
]


@pytest.mark.parametrize(("provider", "path", "value", "where"), PROVIDER_RULES)
async def test_every_provider_rule_is_refused_through_the_hook(
    provider: str, path: str, value: Any, where: str
) -> None:
    found = await problems(edit(example(provider), path, value))
    assert where in found


@pytest.mark.parametrize("provider", ["gke", "eks"])
async def test_zero_nodes_and_zones_and_disk_are_fine_where_the_provider_allows(provider: str) -> None:
    document = edit(example(provider), f"{SUBSTRATE}/flavors/0/nodes", 0)
    document = edit(document, f"{SUBSTRATE}/flavors/0/diskGiB", 200)
    await validate_document(document, tenant_id=TENANT, providers=stub_providers())


async def test_doks_allows_zero_nodes_with_autoscaling_and_spot_with_previews() -> None:
    document = edit(example("doks"), f"{SUBSTRATE}/flavors/0/nodes", 0)
    document = edit(document, f"{SUBSTRATE}/flavors/0/autoscaling", {"minNodes": 0, "maxNodes": 2})
    document = edit(document, f"{SUBSTRATE}/flavors/0/spot", True)
    document = edit(document, "/providerAccounts/0/config/allowSpot", True)
    document = edit(document, "/providerAccounts/0/config/previews", True)
    await validate_document(document, tenant_id=TENANT, providers=stub_providers())


def test_the_json_schema_names_the_spec_keys_and_forbids_others() -> None:
    schema = json.loads(json_schema())
    assert schema["title"] == "FleetConfig"
    assert set(schema["properties"]) == {"version", "sites", "providerAccounts", "pools"}
    assert schema["additionalProperties"] is False
    flavor = schema["$defs"]["Flavor"]
    assert {"machineType", "diskGiB", "autoscaling", "gpus", "zones", "spot", "labels"} <= set(flavor["properties"])
    assert schema["$defs"]["ClusterCreate"]["properties"].keys() == {"location", "privateNodes"}
