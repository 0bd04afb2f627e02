"""The DOKS emulator speaks DigitalOcean API v2 as pydo expects, on the simulated clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any, TypeVar

import httpx
import lightkube
import pydo
import pytest
import yaml
from azure.core.exceptions import ClientAuthenticationError, DecodeError, HttpResponseError
from azure.core.pipeline.policies import RetryPolicy
from lightkube.resources.core_v1 import Node

from better_compute.core.clock import SimClock
from better_compute.testing.doks import DoksEmulator
from better_compute.testing.kube import KubeApiServer

TOKEN = "dop_v1_emulator_test_token_0123456789abcdef"
T = TypeVar("T")
CPU_POOL = {"name": "base", "size": "s-2vcpu-4gb", "count": 1}


def _raw(pipeline_response: Any, body: Any, headers: Any) -> tuple[int, Any, dict[str, str]]:
    return pipeline_response.http_response.status_code, body, dict(pipeline_response.http_response.headers)


class Do:
    """pydo, unchanged, pointed at the emulator; each call in a thread as a driver would."""

    def __init__(self, url: str, token: str = TOKEN) -> None:
        self.url, self.token = url, token

    async def __call__(self, fn: Callable[[Any], T]) -> T:
        def run() -> T:
            with pydo.Client(token=self.token, endpoint=self.url, retry_policy=RetryPolicy.no_retries()) as c:
                return fn(c.kubernetes)

        return await asyncio.to_thread(run)


@pytest.fixture
async def doks(clock: SimClock) -> AsyncIterator[DoksEmulator]:
    async with KubeApiServer(clock) as kube, DoksEmulator(clock, kube, tokens=(TOKEN,)) as emulator:
        yield emulator


@pytest.fixture
def do(doks: DoksEmulator) -> Do:
    return Do(doks.url)


K = dict(enforce_https=False, cls=_raw)


async def _create(do: Do, **body: Any) -> dict[str, Any]:
    request = {"name": "c1", "region": "tor1", "version": "1.32", "node_pools": [CPU_POOL], **body}
    status, made, _ = await do(lambda k: k.create_cluster(request, **K))
    assert status == 201
    cluster: dict[str, Any] = made["kubernetes_cluster"]
    return cluster


async def _advance(doks: DoksEmulator, clock: SimClock, seconds: float) -> None:
    clock.advance(seconds)
    await doks.settle()


async def test_a_cluster_provisions_then_runs_with_its_nodes_in_the_kubernetes_api(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    pool = {
        "name": "gpus",
        "size": "gpu-h100x8-640gb",
        "count": 2,
        "labels": {"team": "ml"},
        "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
    }
    made = await _create(do, node_pools=[pool])
    assert made["status"]["state"] == "provisioning"
    assert made["version"] == "1.32.2-do.0"
    assert made["endpoint"] == ""
    assert made["nvidia_gpu_device_plugin"] == {"enabled": True}, "on by default with an NVIDIA pool"
    assert made["amd_gpu_device_plugin"] == {"enabled": False}

    await _advance(doks, clock, doks.timings.cluster_provisioning - 1)
    _, got, _ = await do(lambda k: k.get_cluster(made["id"], **K))
    assert got["kubernetes_cluster"]["status"]["state"] == "provisioning"
    await _advance(doks, clock, doks.timings.node_provisioning + 1)
    _, got, _ = await do(lambda k: k.get_cluster(made["id"], **K))
    cluster = got["kubernetes_cluster"]
    assert cluster["status"]["state"] == "running"
    kube = doks.clusters[made["id"]].kube
    assert cluster["endpoint"] == kube.endpoint
    nodes = cluster["node_pools"][0]["nodes"]
    assert [n["status"]["state"] for n in nodes] == ["running", "running"]
    for node in nodes:
        assert node["name"].startswith("gpus-") and len(node["name"]) == len("gpus-") + 5
        obj = kube.get_object("Node", node["name"])
        assert obj is not None
        labels = obj["metadata"]["labels"]
        assert labels["doks.digitalocean.com/node-pool"] == "gpus"
        assert labels["team"] == "ml"
        assert labels["doks.digitalocean.com/gpu-brand"] == "nvidia"
        assert labels["doks.digitalocean.com/gpu-model"] == "h100"
        assert {"key": "nvidia.com/gpu", "value": "", "effect": "NoSchedule"} in obj["spec"]["taints"]


async def test_device_plugins_stay_off_when_the_request_turns_them_off(do: Do) -> None:
    pool = {"name": "gpus", "size": "gpu-h100x1-80gb", "count": 1}
    made = await _create(do, node_pools=[pool], nvidia_gpu_device_plugin={"enabled": False})
    assert made["nvidia_gpu_device_plugin"] == {"enabled": False}


async def test_every_answer_carries_rate_limit_headers_and_429_carries_retry_after(
    clock: SimClock, doks: DoksEmulator
) -> None:
    doks.limiter.per_minute = 3
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=doks.url, headers=auth) as http:
        answers = [await http.get("/v2/kubernetes/clusters") for _ in range(3)]
        for i, answer in enumerate(answers):
            assert answer.status_code == 200
            assert answer.headers["ratelimit-limit"] == "5000"
            assert answer.headers["ratelimit-remaining"] == str(5000 - i - 1)
            assert int(answer.headers["ratelimit-reset"]) == int(clock.now().timestamp()) + 3600
        refused = await http.get("/v2/kubernetes/clusters")
        assert refused.status_code == 429
        assert refused.json()["id"] == "too_many_requests"
        assert refused.json()["request_id"]
        assert refused.headers["retry-after"] == "60"
        assert refused.headers["ratelimit-remaining"] == "4997"
        clock.advance(60)
        assert (await http.get("/v2/kubernetes/clusters")).status_code == 200


async def test_every_kind_of_answer_carries_the_rate_limit_headers(doks: DoksEmulator) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "h", "region": "tor1", "version": "1.32", "node_pools": [CPU_POOL]}
    async with httpx.AsyncClient(base_url=doks.url, headers=auth) as http:
        created = await http.post("/v2/kubernetes/clusters", json=body)
        cid = created.json()["kubernetes_cluster"]["id"]
        answers = [
            created,
            await http.get(f"/v2/kubernetes/clusters/{cid}"),
            await http.put(f"/v2/kubernetes/clusters/{cid}", json={"name": "h"}),
            await http.post("/v2/kubernetes/clusters", json=body),
            await http.get("/v2/kubernetes/clusters/nope"),
            await http.get("/v2/no/such/path"),
            await http.get("/v2/kubernetes/clusters", headers={"Authorization": "Bearer wrong"}),
            await http.delete(f"/v2/kubernetes/clusters/{cid}"),
        ]
    assert [a.status_code for a in answers] == [201, 200, 202, 422, 404, 404, 401, 204]
    for answer in answers:
        assert {"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "x-request-id"} <= set(answer.headers)
        if answer.status_code >= 400:
            assert set(answer.json()) == {"id", "message", "request_id"}


async def test_the_hourly_limit_is_5000(clock: SimClock, doks: DoksEmulator) -> None:
    assert (doks.limiter.per_hour, doks.limiter.per_minute) == (5000, 250)
    for _ in range(5000):
        assert doks.limiter.check("t", clock.now()).allowed
        clock.advance(0.5)
    verdict = doks.limiter.check("t", clock.now())
    assert not verdict.allowed and verdict.headers["ratelimit-remaining"] == "0"
    assert int(verdict.headers["retry-after"]) == 3600 - 2500


async def test_a_wrong_token_is_refused(doks: DoksEmulator) -> None:
    with pytest.raises(ClientAuthenticationError):
        await Do(doks.url, "dop_v1_not_a_token")(lambda k: k.list_clusters(enforce_https=False))


async def test_pydo_parses_every_answer_of_a_cluster_lifecycle(doks: DoksEmulator, do: Do, clock: SimClock) -> None:
    made = await _create(do)
    cid = made["id"]
    status, listed, headers = await do(lambda k: k.list_clusters(**K))
    assert status == 200 and [c["id"] for c in listed["kubernetes_clusters"]] == [cid]
    assert headers["ratelimit-limit"] == "5000"
    status, updated, _ = await do(lambda k: k.update_cluster(cid, {"name": "c1", "tags": ["x"]}, **K))
    assert status == 202 and "x" in updated["kubernetes_cluster"]["tags"]
    await _advance(doks, clock, doks.timings.cluster_provisioning + doks.timings.node_provisioning)

    status, upgrades, _ = await do(lambda k: k.get_available_upgrades(cid, **K))
    assert status == 200
    assert [u["slug"] for u in upgrades["available_upgrade_versions"]] == ["1.33.1-do.0"]
    status, _, _ = await do(lambda k: k.upgrade_cluster(cid, {"version": "1.33.1-do.0"}, **K))
    assert status == 202
    _, got, _ = await do(lambda k: k.get_cluster(cid, **K))
    assert got["kubernetes_cluster"]["status"]["state"] == "upgrading"
    await _advance(doks, clock, doks.timings.upgrade)
    _, got, _ = await do(lambda k: k.get_cluster(cid, **K))
    assert got["kubernetes_cluster"]["version"] == "1.33.1-do.0"
    assert doks.clusters[cid].kube.version == "1.33.1"

    body = {"name": "extra", "size": "s-2vcpu-4gb", "count": 1, "auto_scale": True, "min_nodes": 1, "max_nodes": 3}
    status, pool, _ = await do(lambda k: k.add_node_pool(cid, body, **K))
    assert status == 201
    pid = pool["node_pool"]["id"]
    assert (pool["node_pool"]["auto_scale"], pool["node_pool"]["max_nodes"]) == (True, 3)
    status, pools, _ = await do(lambda k: k.list_node_pools(cid, **K))
    assert status == 200 and {p["name"] for p in pools["node_pools"]} == {"base", "extra"}
    status, resized, _ = await do(lambda k: k.update_node_pool(cid, pid, {"name": "extra", "count": 3}, **K))
    assert status == 202 and resized["node_pool"]["count"] == 3
    status, one, _ = await do(lambda k: k.get_node_pool(cid, pid, **K))
    assert status == 200 and len(one["node_pool"]["nodes"]) == 3
    status, _, _ = await do(lambda k: k.delete_node_pool(cid, pid, **K))
    assert status == 204

    status, creds, _ = await do(lambda k: k.get_credentials(cid, expiry_seconds=600, **K))
    assert status == 200
    assert creds["server"] == doks.clusters[cid].kube.endpoint
    assert creds["certificate_authority_data"] == doks.clusters[cid].kube.ca_data
    assert creds["expires_at"] == (clock.now().replace(microsecond=0) + _seconds(600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert doks.issued == [creds["token"]]

    status, _, _ = await do(lambda k: k.delete_cluster(cid, **K))
    assert status == 204
    await _advance(doks, clock, doks.timings.cluster_deletion)
    status, gone, _ = await do(lambda k: k.get_cluster(cid, **K))
    assert status == 404 and gone["id"] == "not_found" and gone["message"]


def _seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


async def test_credentials_are_bearer_tokens_of_the_cluster_until_they_expire(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    cid = (await _create(do))["id"]
    await _advance(doks, clock, doks.timings.cluster_provisioning)
    _, short, _ = await do(lambda k: k.get_credentials(cid, expiry_seconds=600, **K))
    _, default, _ = await do(lambda k: k.get_credentials(cid, **K))
    kube = doks.clusters[cid].kube
    assert kube.authenticate(f"Bearer {short['token']}") is not None
    assert default["expires_at"] == (clock.now() + _seconds(7 * 24 * 3600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    clock.advance(601)
    assert kube.authenticate(f"Bearer {short['token']}") is None
    assert kube.authenticate(f"Bearer {default['token']}") is not None


async def test_refusals_come_in_digitaloceans_envelope(doks: DoksEmulator, do: Do, clock: SimClock) -> None:
    cid = (await _create(do))["id"]
    pid = doks.clusters[cid].pools[0].id
    cases: list[tuple[Callable[[Any], Any], int, str]] = [
        (
            lambda k: k.create_cluster(
                {"name": "c1", "region": "tor1", "version": "1.32", "node_pools": [CPU_POOL]}, enforce_https=False
            ),
            422,
            "already exists",
        ),
        (
            lambda k: k.create_cluster(
                {"name": "c2", "region": "mars1", "version": "1.32", "node_pools": [CPU_POOL]}, enforce_https=False
            ),
            422,
            "region",
        ),
        (
            lambda k: k.create_cluster(
                {"name": "c3", "region": "tor1", "version": "1.32", "node_pools": []}, enforce_https=False
            ),
            422,
            "node pool",
        ),
        (
            lambda k: k.update_node_pool(cid, pid, {"name": "base", "count": 1, "size": "c-8"}, enforce_https=False),
            422,
            "size",
        ),
        (lambda k: k.update_node_pool(cid, pid, {"name": "base"}, enforce_https=False), 422, "count"),
        (
            lambda k: k.add_node_pool(cid, {"name": "z", "size": "s-2vcpu-4gb", "count": 0}, enforce_https=False),
            422,
            "at least 1",
        ),
        (lambda k: k.upgrade_cluster(cid, {"version": "9.9"}, enforce_https=False), 422, "upgrade"),
    ]
    for call, status, words in cases:
        with pytest.raises(HttpResponseError) as caught:
            await do(call)
        assert caught.value.status_code == status
        body = caught.value.response.json()
        assert body["id"] == "unprocessable_entity" and words in body["message"] and body["request_id"]


async def test_a_team_sees_only_its_own_clusters(doks: DoksEmulator, do: Do) -> None:
    cid = (await _create(do))["id"]
    doks.add_token("dop_v1_other_team_token_000000000000", team="other")
    other = Do(doks.url, "dop_v1_other_team_token_000000000000")
    status, body, _ = await other(lambda k: k.get_cluster(cid, **K))
    assert status == 404 and body["id"] == "not_found"


async def test_faults_quota_stockout_refused_delete_throttle(doks: DoksEmulator, do: Do) -> None:
    cid = (await _create(do))["id"]
    doks.faults.quota(2)
    with pytest.raises(HttpResponseError) as caught:
        await do(lambda k: k.add_node_pool(cid, {"name": "big", "size": "c-8", "count": 2}, enforce_https=False))
    assert "droplet limit" in caught.value.response.json()["message"]
    doks.faults.quota(None)
    doks.faults.stockout("gpu-h100x8-640gb")
    with pytest.raises(HttpResponseError) as caught:
        await do(
            lambda k: k.add_node_pool(cid, {"name": "g", "size": "gpu-h100x8-640gb", "count": 1}, enforce_https=False)
        )
    assert "not available" in caught.value.response.json()["message"]
    doks.faults.refuse_delete(cid, "cluster has volumes attached", status=403, error_id="forbidden")
    with pytest.raises(HttpResponseError) as caught:
        await do(lambda k: k.delete_cluster(cid, enforce_https=False))
    assert caught.value.status_code == 403 and caught.value.response.json()["id"] == "forbidden"
    doks.faults.allow_delete(cid)
    doks.faults.throttle(1)
    with pytest.raises(HttpResponseError) as caught:
        await do(lambda k: k.list_clusters(enforce_https=False))
    assert caught.value.status_code == 429 and caught.value.response.headers["retry-after"]
    status, _, _ = await do(lambda k: k.delete_cluster(cid, **K))
    assert status == 204


async def test_a_control_plane_that_never_answers_stays_provisioning(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    doks.faults.control_plane_never_answers()
    cid = (await _create(do))["id"]
    await _advance(doks, clock, 24 * 3600)
    _, got, _ = await do(lambda k: k.get_cluster(cid, **K))
    assert got["kubernetes_cluster"]["status"]["state"] == "provisioning"
    assert doks.clusters[cid].kube.unresponsive
    with pytest.raises(HttpResponseError):
        await do(lambda k: k.get_credentials(cid, expiry_seconds=600, enforce_https=False))


async def test_a_reclaimed_spot_node_leaves_the_cluster_and_is_replaced(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    cid = (await _create(do, node_pools=[{**CPU_POOL, "name": "cheap", "tags": ["spot"]}]))["id"]
    await _advance(doks, clock, doks.timings.cluster_provisioning + doks.timings.node_provisioning)
    kube = doks.clusters[cid].kube
    name = await doks.faults.reclaim_spot(cid)
    assert kube.get_object("Node", name) is None
    _, pool, _ = await do(lambda k: k.list_node_pools(cid, **K))
    nodes = pool["node_pools"][0]["nodes"]
    assert "spot" in pool["node_pools"][0]["tags"] and "spot" not in pool["node_pools"][0]
    assert [n["status"]["state"] for n in nodes] == ["provisioning"] and nodes[0]["name"] != name
    await _advance(doks, clock, doks.timings.node_provisioning)
    assert kube.get_object("Node", nodes[0]["name"]) is not None


async def test_spot_is_the_previews_tag_not_a_node_pool_field_which_the_api_does_not_have(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    cid = (await _create(do, node_pools=[{**CPU_POOL, "name": "asked", "spot": True}]))["id"]
    await _advance(doks, clock, doks.timings.cluster_provisioning + doks.timings.node_provisioning)
    _, pools, _ = await do(lambda k: k.list_node_pools(cid, **K))
    assert "spot" not in pools["node_pools"][0] and "spot" not in pools["node_pools"][0]["tags"]
    with pytest.raises(KeyError, match="no running Spot node"):
        await doks.faults.reclaim_spot(cid)


async def test_a_seeded_cluster_is_running_with_its_plugins_as_asked(doks: DoksEmulator, do: Do) -> None:
    gpu_pool = {"name": "own-gpus", "size": "gpu-h100x1-80gb", "count": 1}
    on = await doks.seed_cluster(name="with-plugins", node_pools=(gpu_pool,))
    off = await doks.seed_cluster(name="without", node_pools=(gpu_pool,), nvidia_gpu_device_plugin=False)
    _, a, _ = await do(lambda k: k.get_cluster(on, **K))
    _, b, _ = await do(lambda k: k.get_cluster(off, **K))
    assert a["kubernetes_cluster"]["status"]["state"] == "running"
    assert a["kubernetes_cluster"]["nvidia_gpu_device_plugin"]["enabled"] is True
    assert b["kubernetes_cluster"]["nvidia_gpu_device_plugin"]["enabled"] is False
    node = a["kubernetes_cluster"]["node_pools"][0]["nodes"][0]
    assert node["status"]["state"] == "running"
    assert doks.clusters[on].kube.get_object("Node", node["name"]) is not None


async def test_clusters_are_listed_in_pages(do: Do) -> None:
    for i in range(3):
        await _create(do, name=f"p{i}")
    _, first, _ = await do(lambda k: k.list_clusters(per_page=2, page=1, **K))
    _, second, _ = await do(lambda k: k.list_clusters(per_page=2, page=2, **K))
    assert [c["name"] for c in first["kubernetes_clusters"]] == ["p0", "p1"]
    assert "page=2" in first["links"]["pages"]["next"] and first["meta"]["total"] == 3
    assert [c["name"] for c in second["kubernetes_clusters"]] == ["p2"] and not second["links"]["pages"]


async def test_the_kubeconfig_is_yaml_a_kubernetes_client_connects_with(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    made = await _create(do)
    await _advance(doks, clock, doks.timings.cluster_provisioning + doks.timings.node_provisioning)
    path = f"/v2/kubernetes/clusters/{made['id']}/kubeconfig"
    async with httpx.AsyncClient(base_url=doks.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        answer = await http.get(path, params={"expiry_seconds": 300})
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/yaml"
        assert "ratelimit-remaining" in answer.headers
        sso = await http.get(path, params={"type": "sso"})
        assert sso.status_code == 422 and sso.json()["id"] == "unprocessable_entity"
        missing = await http.get("/v2/kubernetes/clusters/00000000-0000-0000-0000-000000000000/kubeconfig")
        assert missing.status_code == 404 and missing.json()["id"] == "not_found"
    config = yaml.safe_load(answer.text)
    assert config["current-context"] == "do-tor1-c1"
    assert config["users"][0]["name"] == "do-tor1-c1-admin"
    kube = doks.clusters[made["id"]].kube
    assert config["clusters"][0]["cluster"]["server"] == kube.endpoint
    client = lightkube.AsyncClient(config=lightkube.KubeConfig.from_dict(config))
    try:
        names = [n.metadata.name async for n in client.list(Node) if n.metadata is not None]
    finally:
        await client.close()
    assert len(names) == 1 and str(names[0]).startswith("base-")
    clock.advance(301)
    assert kube.authenticate(f"Bearer {config['users'][0]['user']['token']}") is None, "expiry_seconds holds"
    with pytest.raises(DecodeError, match="application/yaml"):
        await do(lambda k: k.get_kubeconfig(made["id"], enforce_https=False))  # as against DigitalOcean: pydo#264


async def test_options_list_the_regions_versions_and_sizes_a_cluster_can_use(do: Do) -> None:
    options = (await do(lambda k: k.list_options(enforce_https=False)))["options"]
    assert {"name": "Toronto 1", "slug": "tor1"} in options["regions"]
    versions = [v["slug"] for v in options["versions"]]
    assert versions[0] == "1.33.1-do.0" and "1.30.10-do.0" in versions, "newest first"
    assert {"name": "gpu-h100x8-640gb", "slug": "gpu-h100x8-640gb"} in options["sizes"]
    await _create(do, version=options["versions"][-1]["slug"], region=options["regions"][0]["slug"])


async def test_destroy_with_associated_resources_deletes_the_cluster(
    doks: DoksEmulator, do: Do, clock: SimClock
) -> None:
    first, second = (await _create(do))["id"], (await _create(do, name="c2"))["id"]
    await _advance(doks, clock, doks.timings.cluster_provisioning)
    associated = await do(lambda k: k.list_associated_resources(first, enforce_https=False))
    assert associated == {"load_balancers": [], "volumes": [], "volume_snapshots": []}
    status, foreign, _ = await do(
        lambda k: k.destroy_associated_resources_selective(first, {"volumes": ["vol-1"]}, **K)
    )
    assert status == 404 and foreign["id"] == "not_found"
    assert doks.clusters[first].state == "running", "a refused destroy changes nothing"

    status, _, _ = await do(lambda k: k.destroy_associated_resources_selective(first, {"volumes": []}, **K))
    assert status == 204
    status, _, _ = await do(lambda k: k.destroy_associated_resources_dangerous(second, **K))
    assert status == 204
    assert {doks.clusters[first].state, doks.clusters[second].state} == {"deleting"}
    await _advance(doks, clock, doks.timings.cluster_deletion)
    assert (await do(lambda k: k.get_cluster(second, **K)))[0] == 404


async def test_clusters_made_in_one_instant_share_one_wake_and_one_settle(
    doks: DoksEmulator, do: Do, clock: SimClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pool's timer used to walk every cluster at the same instant: quadratic in the fleet."""
    for n in range(6):
        await _create(do, name=f"c{n}")
    settles = 0
    settle = doks.settle

    async def counted() -> None:
        nonlocal settles
        settles += 1
        await settle()

    monkeypatch.setattr(doks, "settle", counted)
    clock.advance(doks.timings.cluster_provisioning)
    for _ in range(20):
        await asyncio.sleep(0)
    assert settles == 1
    status, listed, _ = await do(lambda k: k.list_clusters(**K))
    assert status == 200
    assert {c["status"]["state"] for c in listed["kubernetes_clusters"]} == {"running"}


async def test_cluster_tags_are_refused_as_digitalocean_refuses_them(doks: DoksEmulator, do: Do) -> None:
    """DigitalOcean's tag rules: letters, digits, ':', '-' and '_', at most 255 characters; no '/' or '.'."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=doks.url, headers=auth) as http:
        for tag in ("better-compute.dev/deployment:x", "a b", "t" * 256):
            body = {"name": "c1", "region": "tor1", "version": "1.32", "node_pools": [CPU_POOL], "tags": [tag]}
            refused = await http.post("/v2/kubernetes/clusters", json=body)
            assert refused.status_code == 422 and "tags may contain" in refused.text, tag
    made = await _create(do, tags=["better-compute", "better-compute-dev-deployment:0123456789abcdef"])
    assert "better-compute-dev-deployment:0123456789abcdef" in made["tags"]
