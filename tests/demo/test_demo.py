"""`better-compute demo --json --keep`: the story's summary, then the CLI and the HTTP API against the kept world."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path

import httpx
import pytest
from doc_shell import base_env, of, run_block, scratch
from kept_world import KeptWorld
from typer.testing import CliRunner

from better_compute.cli.main import app

POOLS = {"gke-h100": "gcp", "eks-h100": "aws", "doks-h100": "digitalocean"}


def test_every_pool_was_ready(kept_world: KeptWorld) -> None:
    pools = kept_world.summary["pools"]
    assert {name: pool["provider"] for name, pool in pools.items()} == POOLS
    assert all(pool["ready"] and pool["nodesJoined"] >= 1 for pool in pools.values()), pools
    assert kept_world.summary["made"]["clusters"] == 3


def test_a_reservation_was_advertised_by_bcd(kept_world: KeptWorld) -> None:
    reservations = kept_world.summary["reservations"]
    assert {r["pool"] for r in reservations} == set(POOLS)
    for booked in reservations:
        assert booked["gpus"] == 8
        assert len(booked["advertised"]) == 8, "the device plugin advertises exactly the booked GPUs"


def test_a_spot_reclaim_preempted_a_spot_reservation(kept_world: KeptWorld) -> None:
    (preemption,) = kept_world.summary["preemptions"]
    assert preemption["pool"] == "gke-h100"
    assert preemption["reservation"].startswith("res_")


def test_a_lost_gpu_was_quarantined_and_its_machine_replaced(kept_world: KeptWorld) -> None:
    (replaced,) = kept_world.summary["replacements"]
    assert replaced["pool"] == "doks-h100" and replaced["reason"] == "gpu-lost"
    assert replaced["reservation"].startswith("res_") and replaced["gpu"].startswith("GPU-")
    assert replaced["newNode"] and replaced["newNode"] != replaced["node"], "a new droplet, a new Node"


def test_a_flavor_was_scaled_up_and_down(kept_world: KeptWorld) -> None:
    assert [s["nodes"] for s in kept_world.summary["scaled"]] == [2, 1]


def test_a_cluster_someone_else_runs_was_adopted_beside_its_owners_node_pool(kept_world: KeptWorld) -> None:
    adopted = kept_world.summary["adopted"]
    assert adopted["pool"] == "gke-adopted" and adopted["cluster"] == "us-central1/their-cluster"
    assert adopted["ownerPools"] == ["their-pool"] and adopted["ownerPoolsUntouched"] is True
    (ours,) = adopted["ourPools"]
    assert re.fullmatch(r"bc-[a-z0-9]{6}-h100", ours), ours
    assert adopted["nodesJoined"] == 1, "its Node joined through the real bcd"


def test_the_prune_kept_the_adopted_cluster_and_left_nothing_of_ours_in_it(kept_world: KeptWorld) -> None:
    after = kept_world.summary["adopted"]["afterPrune"]
    assert after == {"clusterKept": True, "ownerPoolsKept": True, "oursLeft": []}


def test_nothing_was_left_after_the_prune(kept_world: KeptWorld) -> None:
    left = kept_world.summary["leftAfterPrune"]
    assert set(left) >= {
        "gcp",
        "aws",
        "digitalocean",
        "adoptedOursLeft",
        "kubernetes-api",
        "nodes",
        "activeReservations",
    }
    assert all(count == 0 for count in left.values()), left


def test_the_summary_counts_provider_calls_and_time(kept_world: KeptWorld) -> None:
    calls = kept_world.summary["providerCalls"]
    assert all(calls[api]["writes"] > 0 for api in ("gcp", "aws", "digitalocean", "kubernetes")), calls
    assert kept_world.summary["simulatedSeconds"] > kept_world.summary["wallSeconds"] > 0


def test_substrates_get_and_fleet_plan_work_against_the_kept_world(
    kept_world: KeptWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in kept_world.environ() if k.startswith("BC_")]:
        monkeypatch.delenv(name, raising=False)
    for name, value in kept_world.env.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    got = runner.invoke(app, ["substrates", "get", "gke-h100", "--json"])
    assert got.exit_code == 0, got.output
    view = json.loads(got.stdout)
    assert view["state"] == "ready" and view["nodesJoined"] == view["nodesListed"] != []
    plan = runner.invoke(app, ["fleet", "plan", kept_world.env["BC_DEMO_FLEET"]])
    assert plan.exit_code == 0, plan.output  # 0: the kept fleet is what the document says
    assert "No changes" in plan.stdout
    doctor = runner.invoke(app, ["doctor"])  # the server's view: the kept server has a substrate agent
    assert doctor.stdout.startswith(f"server: {kept_world.env['BC_BASE_URL']}"), doctor.output
    assert "kubernetes.substrate-agent-missing" not in doctor.stdout


def test_the_http_api_answers_for_the_kept_world(kept_world: KeptWorld) -> None:
    env = kept_world.env
    with httpx.Client(
        base_url=env["BC_BASE_URL"], verify=ssl.create_default_context(cafile=env["CURL_CA_BUNDLE"])
    ) as client:
        answer = client.get(
            "/v1/pools/doks-h100/kubernetes-substrate", headers={"Authorization": f"Bearer {env['BC_API_KEY']}"}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "ready"
        assert client.get("/v1/pools").status_code == 401, "the API still needs a key"


def test_the_console_of_the_kept_world_shows_its_pools(kept_world: KeptWorld) -> None:
    env = kept_world.env
    assert env["BC_CONSOLE_URL"] == f"{env['BC_BASE_URL']}/ui/"
    with httpx.Client(verify=ssl.create_default_context(cafile=env["CURL_CA_BUNDLE"])) as client:
        form = client.get(f"{env['BC_BASE_URL']}/ui/sign-in").text
        csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        signed_in = client.post(f"{env['BC_BASE_URL']}/ui/sign-in", data={"api_key": env["BC_API_KEY"], "csrf": csrf})
        assert signed_in.status_code == 303, signed_in.text
        assert "secure" in signed_in.headers["set-cookie"].lower()  # the kept world serves https
        fleet = client.get(env["BC_CONSOLE_URL"])
        assert fleet.status_code == 200, fleet.text
        for pool in POOLS:  # every pool of the story, with its provider
            assert f'data-pool="{pool}"' in fleet.text, pool
        assert fleet.text.count("state-ready") == len(POOLS), fleet.text


def test_live_commands_run_against_the_kept_world(kept_world: KeptWorld, tmp_path: Path) -> None:
    blocks = of("live")
    assert blocks, "the quickstart has commands for the kept world"
    env = base_env(tmp_path)
    env.update(kept_world.env)
    for block in blocks:
        run_block(block, scratch(tmp_path / block.where.replace("/", "_")), env)


def test_the_kept_world_stops_with_this_module(request: pytest.FixtureRequest) -> None:
    """Its teardown comes when the last test of this module is done, not at the end of the whole run."""
    definitions = request._fixturemanager.getfixturedefs("kept_world", request.node)
    assert definitions is not None
    assert [d.scope for d in definitions] == ["module"]
