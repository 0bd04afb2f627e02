"""FleetConfig validation with the real DOKS driver: the spec's DOKS document passes, DOKS rules land at their paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from better_compute.core.errors import ComputeError
from better_compute.fleet.validate import validate_document
from better_compute.providers.digitalocean import DoksKubernetes, digitalocean_provider

DOCUMENT: dict[str, Any] = {
    "version": 1,
    "sites": [{"name": "k8s", "kind": "shared", "region": "tor1"}],
    "providerAccounts": [
        {
            "name": "managed-k8s",
            "provider": "digitalocean",
            "config": {"token": "secret://tenant_f/sec_1", "regions": ["tor1"]},
        }
    ],
    "pools": [
        {
            "name": "gpu-fleet",
            "site": "k8s",
            "class": "metal-host",
            "gpuModel": "H100",
            "policy": {
                "kubernetes": {"platformOperated": True},
                "substrate": {
                    "kind": "kubernetes",
                    "account": "managed-k8s",
                    "cluster": {"create": {"location": "tor1"}},
                    "flavors": [
                        {
                            "name": "h100",
                            "machineType": "gpu-h100x8-640gb",
                            "nodes": 2,
                            "gpus": {"type": "nvidia-h100", "count": 8},
                        }
                    ],
                },
            },
        }
    ],
}


async def _validate(document: dict[str, Any]) -> list[str]:
    provider = digitalocean_provider(endpoint="http://127.0.0.1:9")
    assert isinstance(provider.kubernetes, DoksKubernetes)
    try:
        await validate_document(document, tenant_id="tenant_f", providers={"digitalocean": provider})
    except ComputeError as exc:
        return [p.path for p in exc.problems]
    finally:
        provider.kubernetes.close()
    return []


async def test_the_specs_doks_document_is_valid() -> None:
    assert await _validate(DOCUMENT) == []


async def test_doks_rules_are_reported_at_the_flavors_paths() -> None:
    document = copy.deepcopy(DOCUMENT)
    flavor = document["pools"][0]["policy"]["substrate"]["flavors"][0]
    flavor.update(nodes=0, spot=True, zones=["tor1-a"], diskGiB=100, gpus={"type": "nvidia-h100", "count": 1})
    base = "/pools/0/policy/substrate/flavors/0"
    paths = await _validate(document)
    assert sorted(paths) == sorted(f"{base}/{key}" for key in ("gpus", "nodes", "spot", "zones", "diskGiB"))


async def test_account_rules_land_at_the_accounts_entry() -> None:
    document = copy.deepcopy(DOCUMENT)
    document["providerAccounts"][0]["config"] = {"token": "dop_v1_plain_value_0000", "regions": ["tor1", "mars1"]}
    paths = await _validate(document)
    assert set(paths) == {"/providerAccounts/0/config/token", "/providerAccounts/0/config/regions/1"}


@pytest.mark.parametrize("location", ["tor1-a", "us-east-1"])
async def test_a_location_that_is_no_doks_region_is_refused(location: str) -> None:
    document = copy.deepcopy(DOCUMENT)
    document["pools"][0]["policy"]["substrate"]["cluster"] = {"create": {"location": location}}
    assert await _validate(document) == ["/pools/0/policy/substrate/cluster/create/location"]
