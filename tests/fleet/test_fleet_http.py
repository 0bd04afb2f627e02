"""fleet_module() in a Compute: compute.fleet, and POST /v1/fleet/plan and /v1/fleet/apply over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fleet_documents import SUBSTRATE, edit, example
from fleet_stub import StubKubernetes, stub_providers

from better_compute.api.app import create_app
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet import fleet_module
from better_compute.kubernetes.provider import Quota
from better_compute.server import Compute, better_compute
from better_compute.store import Database
from better_compute.vps import vps

SECRET = "s" * 40


@dataclass
class Served:
    compute: Compute
    client: httpx.AsyncClient
    tenant_id: str


@pytest.fixture
async def served(database: Database) -> AsyncIterator[Served]:
    compute = better_compute(
        database=database.url,
        secret=SECRET,
        modules=[vps(providers=list(stub_providers().values())), fleet_module()],
        clock=SimClock(),
    )
    tenant = await compute.iam.create_tenant("http-fleet")
    _, key = await compute.iam.create_api_key(tenant.id)
    transport = httpx.ASGITransport(app=create_app(compute))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield Served(compute, client, tenant.id)
    await compute.close()


async def test_the_python_api_plans_and_applies(served: Served) -> None:
    missing = example("doks", tenant_id=served.tenant_id)
    with pytest.raises(ComputeError) as caught:
        await served.compute.fleet.plan(missing, tenant_id=served.tenant_id)
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("/providerAccounts/0/config/token", "no secret of your tenant has this reference: create it first")
    ]
    token = await served.compute.secrets.create(served.tenant_id, "dop_v1_" + "a" * 40)
    document = example("doks", tenant_id=served.tenant_id, token=token)
    plan = await served.compute.fleet.plan(document, tenant_id=served.tenant_id)
    assert plan.counts()["create"] == 3
    await served.compute.fleet.apply(document, tenant_id=served.tenant_id)
    account = await served.compute.provider_accounts.get(served.tenant_id, "managed-k8s")
    assert account.provider == "digitalocean" and account.config["token"].startswith("secret://")
    assert not (await served.compute.fleet.plan(document, tenant_id=served.tenant_id)).has_changes
    assert served.compute.self_check() == [f for f in served.compute.self_check() if not f.code.startswith("fleet.")]


async def test_plan_and_apply_over_http(served: Served) -> None:
    document = example("gke", tenant_id=served.tenant_id)
    planned = await served.client.post("/v1/fleet/plan", json={"document": document})
    assert planned.status_code == 200
    assert planned.json()["summary"]["create"] == 3
    saved = planned.json()
    applied = await served.client.post("/v1/fleet/apply", json={"plan": saved})
    assert applied.status_code == 200, applied.text
    assert applied.json()["fingerprint"] == saved["fingerprint"]
    stale = await served.client.post("/v1/fleet/apply", json={"plan": saved})
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "CONFLICT"


async def test_http_problems_point_into_the_request_body(served: Served) -> None:
    document = edit(example("gke", tenant_id=served.tenant_id), f"{SUBSTRATE}/flavors/0/nodes", -1)
    answer = await served.client.post("/v1/fleet/plan", json={"document": document, "prune": False})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert [p["path"] for p in error["problems"]] == [f"/document{SUBSTRATE}/flavors/0/nodes"]
    unknown = await served.client.post("/v1/fleet/apply", json={"document": document, "force": True})
    assert unknown.status_code == 400 and unknown.json()["error"]["problems"][0]["path"] == "/force"
    not_json = await served.client.post("/v1/fleet/plan", content=b"{", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400


async def test_blocked_apply_over_http_is_refused(served: Served) -> None:
    document = example("gke", tenant_id=served.tenant_id)
    await served.client.post("/v1/fleet/apply", json={"document": document})
    moved = edit(document, f"{SUBSTRATE}/cluster/create/location", "us-east4")
    answer = await served.client.post("/v1/fleet/apply", json={"document": moved})
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "INVALID_STATE"


async def test_the_routes_need_an_api_key(served: Served) -> None:
    answer = await served.client.post(
        "/v1/fleet/plan", json={"document": {"version": 1}}, headers={"Authorization": ""}
    )
    assert answer.status_code in (401, 403)


def test_fleet_without_vps_is_reported_by_self_check() -> None:
    compute = better_compute(database="sqlite:///:memory:", secret=SECRET, modules=[fleet_module()])
    assert any(f.code == "fleet.vps-missing" and f.severity == "error" for f in compute.self_check())


async def test_a_plan_over_http_costs_the_changes_with_the_price_table_in_the_body(served: Served) -> None:
    document = example("gke", tenant_id=served.tenant_id)
    prices = {"version": 1, "onDemand": {"gcp": {"a3-highgpu-8g": 88.5}}}
    planned = await served.client.post("/v1/fleet/plan", json={"document": document, "prices": prices})
    assert planned.status_code == 200, planned.text
    cost = planned.json()["cost"]
    assert cost["currency"] == "USD" and cost["delta"] == [177.0, 177.0], "2 Nodes in the account's one zone"
    assert (await served.client.post("/v1/fleet/plan", json={"document": document})).json()["cost"] is None

    bad = await served.client.post(
        "/v1/fleet/plan", json={"document": document, "prices": {"version": 1, "onDemand": {"gcp": {"x": "1"}}}}
    )
    assert bad.status_code == 400
    assert [p["path"] for p in bad.json()["error"]["problems"]] == ["/prices/onDemand/gcp/x"]
    on_apply = await served.client.post("/v1/fleet/apply", json={"document": document, "prices": prices})
    assert on_apply.status_code == 400 and on_apply.json()["error"]["path"] == "/prices"
    assert (await served.compute.fleet.plan(document, tenant_id=served.tenant_id)).counts()["create"] == 3


def stub(served: Served, provider: str) -> StubKubernetes:
    kube = served.compute.fleet.providers[provider].kubernetes
    assert isinstance(kube, StubKubernetes)
    return kube


async def test_the_plan_warns_of_a_quota_the_change_would_exceed_and_of_one_it_cannot_read(served: Served) -> None:
    document = example("gke", tenant_id=served.tenant_id)
    gke = stub(served, "gcp")
    gke.quota = (Quota("NVIDIA_H100_GPUS", "NVIDIA H100 GPUs", "GPUs", limit=1, usage=0, adds=0, scope="us-central1"),)
    body = (await served.client.post("/v1/fleet/plan", json={"document": document})).json()
    (check,) = body["quota"]
    assert (check["account"], check["provider"], check["place"], check["error"]) == (
        "managed-k8s",
        "gcp",
        "us-central1",
        None,
    )
    assert check["quotas"][0] | {"adds": 2.0} == check["quotas"][0] and check["quotas"][0]["exceeded"] is True
    assert body["warnings"] == check["warnings"] and "would be 2 GPUs of a limit of 1" in body["warnings"][0]
    ((place, needs),) = gke.asked
    assert place == "us-central1" and [(n.machine_type, n.count) for n in needs] == [("a3-highgpu-8g", 2)]

    gke.quota = ComputeError(ErrorCode.PERMISSION_DENIED, "Required 'compute.regions.get' permission")
    denied = (await served.client.post("/v1/fleet/plan", json={"document": document})).json()
    assert denied["quota"][0]["error"] == "PERMISSION_DENIED: Required 'compute.regions.get' permission"
    assert "could not be read" in denied["warnings"][0] and denied["summary"]["create"] == 3, "a warning, not a failure"

    await served.compute.fleet.apply(document, tenant_id=served.tenant_id)
    shrunk = edit(document, f"{SUBSTRATE}/flavors/0/nodes", 1)
    gke.asked.clear()
    assert (await served.client.post("/v1/fleet/plan", json={"document": shrunk})).json()["quota"] == []
    assert gke.asked == [], "a shrink adds nothing: no quota is asked"
