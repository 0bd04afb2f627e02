"""Before apply, the plan reads each provider's quota for what the change adds, and prices it, through the CLI
and HTTP (GKE, EKS, DOKS).

The real drivers ask the emulators through the real SDKs: GKE Compute Engine's regions.get
(`NVIDIA_H100_GPUS` of the region), EKS Service Quotas' GetServiceQuota (`L-417A185B`, Running
On-Demand P instances, in vCPUs) with DescribeInstances for the usage, DOKS `GET /v2/account`'s
droplet limit with `GET /v2/droplets`. A first plan of the example (2 Nodes a zone) against a quota
set too low warns, in `--json`, over HTTP and in the plan's text (which `fleet apply` shows before
it asks); a quota the caller may not read is a warning too, and the plan is made all the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from adopt_world import cli
from e2e_world import World
from test_fleet_plan_disruption import plan_over_cli

PRICES = {
    "version": 1,
    "onDemand": {
        "gcp": {"a3-highgpu-8g": 88.5},
        "aws": {"p5.48xlarge": 98.25},
        "digitalocean": {"gpu-h100x8-640gb": 24},
    },
}
QUOTA = {
    # provider: (metric, unit, limit set, usage, what the example adds, its cost per hour)
    "gke": ("NVIDIA_H100_GPUS", "GPUs", 8, 0, 16, 177.0),
    "eks": ("L-417A185B", "vCPUs", 384, 0, 768, 393.0),
    "doks": ("droplet_limit", "Droplets", 1, 0, 2, 48.0),
}


QUOTA_NAMES = {"gke": "NVIDIA H100 GPUs", "eks": "Running On-Demand P instances", "doks": "Droplet limit"}


def too_low(world: World, provider: str) -> None:
    if provider == "gke":
        world.cloud.gke.quotas.set("us-central1", "NVIDIA_H100_GPUS", limit=8)
    elif provider == "eks":
        world.cloud.eks.quotas.set("L-417A185B", 384)
    else:
        world.cloud.doks.faults.quota(droplets=1)


def unreadable(world: World, provider: str) -> str:
    if provider == "gke":
        world.cloud.gke.faults.compute_denied = True
        return "compute.regions.get"
    if provider == "eks":
        world.cloud.eks.quotas.denied = True
        return "servicequotas:GetServiceQuota"
    world.cloud.doks.faults.forbid("account:read")
    return "You are not authorized to perform this operation"


async def plan_over_http(world: World, body: dict[str, Any]) -> dict[str, Any]:
    import ssl

    import httpx

    _, key = await world.compute.iam.create_api_key(world.tenant_id)
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        answer = await http.post("/v1/fleet/plan", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_plan_shows_the_providers_quota_and_the_cost_and_warns_before_apply(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = world.document(provider)
    metric, unit, limit, usage, adds, cost = QUOTA[provider]
    too_low(world, provider)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))

    over_cli = await plan_over_cli(world, tmp_path, document, "--prices", str(prices))
    over_http = await plan_over_http(world, {"document": document, "prices": PRICES})
    for body in (over_cli, over_http):
        (check,) = body["quota"]
        assert (check["account"], check["error"]) == ("managed-k8s", None)
        (quota,) = check["quotas"]
        assert (quota["metric"], quota["unit"], quota["limit"], quota["usage"], quota["adds"]) == (
            metric,
            unit,
            limit,
            usage,
            adds,
        )
        assert quota["exceeded"] is True and len(body["warnings"]) == 1 and metric in body["warnings"][0]
        assert body["cost"]["delta"] == [cost, cost] and body["cost"]["unpriced"] == []
    assert over_cli["quota"] == over_http["quota"] and over_cli["cost"] == over_http["cost"]

    text = await cli(world, "fleet", "plan", str(tmp_path / "fleet.json"))
    shown = " ".join(text.stdout.split())  # rich wraps at the terminal's width
    assert text.exit_code == 2, text.output
    assert f"! {QUOTA_NAMES[provider]} ({metric}" in shown and "Warning: account managed-k8s:" in shown
    assert shown.index("Warning: account managed-k8s:") < shown.index("Plan: 3 to create"), "above the summary"

    denied = unreadable(world, provider)
    unread = await plan_over_cli(world, tmp_path, document)
    (check,) = unread["quota"]
    assert check["quotas"] == [] and denied in check["error"]
    assert "could not be read" in unread["warnings"][0] and unread["summary"]["create"] == 3
