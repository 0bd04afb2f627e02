"""Clusters someone else runs, for the adopt stories: seeded on each emulator, with an own node
pool named like the example's flavor, and the FleetConfig document that adopts them."""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
from click.testing import Result
from e2e_world import SECRET, World
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.core.errors import ComputeError
from better_compute.kubernetes.provider import ClusterState, NodePoolState
from better_compute.server import Compute
from better_compute.testing import Cloud, KubeCluster
from better_compute.testing.gke import SeedPool

OWN_POOL = "h100"
"""The owner's node pool: the same name as the example's flavor, and never ours to touch."""
PER_ZONE = {"gke": 1, "eks": 2, "doks": 1}
"""Nodes one `nodes: 1` makes on the adopted cluster (EKS' subnets span two zones)."""


async def seed(world: World, provider: str, name: str = "theirs", **options: Any) -> str:
    """A running cluster of the owner's own, in the example account's place; returns its adopt id."""
    return await seed_cloud(world.cloud, provider, name, **options)


async def seed_cloud(cloud: Cloud, provider: str, name: str, **options: Any) -> str:
    """`seed` for a run that has its simulated world but no `World` around it (the crash sweeps)."""
    if provider == "gke":
        return await cloud.gke.seed_cluster(
            name,
            project="my-project",
            location="us-central1",
            locations=("us-central1-a",),
            pools=(SeedPool(OWN_POOL),),
        )
    if provider == "eks":
        return await cloud.eks.seed_cluster(name, nodegroups={OWN_POOL: ("m7i.large", 1)}, **options)
    plugin = options.pop("nvidia_gpu_device_plugin", False)
    return await cloud.doks.seed_cluster(
        name=name,
        node_pools=({"name": OWN_POOL, "size": "s-2vcpu-4gb", "count": 1},),
        nvidia_gpu_device_plugin=plugin,
        **options,
    )


def adopting(world: World, provider: str, adopt_id: str, *, pool: str = "gpu-fleet") -> dict[str, Any]:
    """The example document, adopting `adopt_id` with one node of the flavor."""
    document = copy.deepcopy(world.document(provider))
    entry = document["pools"][0]
    entry["name"] = pool
    substrate = entry["policy"]["substrate"]
    substrate["cluster"] = {"adopt": adopt_id}
    substrate["flavors"][0]["nodes"] = 1
    return document


ONE_ZONE = {"gke": None, "eks": ["us-east-1a"], "doks": None}
"""EKS' account spans two Availability Zones and counts `nodes` per zone: a flavor sized to N keeps to one."""


def sized(document: dict[str, Any], provider: str, nodes: int, booked_nodes: str | None = None) -> dict[str, Any]:
    """The document with its first pool's first flavor at `nodes` Nodes in all (one zone on EKS)."""
    resized = copy.deepcopy(document)
    substrate = resized["pools"][0]["policy"]["substrate"]
    flavor = substrate["flavors"][0]
    flavor["nodes"] = nodes
    if ONE_ZONE[provider]:
        flavor["zones"] = ONE_ZONE[provider]
    if booked_nodes is not None:
        substrate["disruption"] = {"bookedNodes": booked_nodes}
    return resized


async def view(world: World, pool: str = "gpu-fleet") -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool)


async def ready_and_joined(world: World, count: int, pool: str = "gpu-fleet") -> bool:
    try:
        current = await view(world, pool)
    except ComputeError:
        return False
    return current.state == "ready" and len(current.nodes_joined) == count == len(current.nodes_listed)


async def state_is(world: World, state: str, pool: str = "gpu-fleet") -> bool:
    try:
        return str((await view(world, pool)).state) == state
    except ComputeError:
        return False


async def provider_cluster(world: World, adopt_id: str) -> tuple[ClusterState | None, NodePoolState | None]:
    """The cluster at the provider, and the owner's node pool in it."""
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await k.account(world.tenant_id, "managed-k8s")
    state = await driver.get_cluster(account, adopt_id)
    own = await driver.get_node_pool(account, state.cluster_id, OWN_POOL) if state else None
    return state, own


def only_kube(world: World) -> KubeCluster:
    (cluster,) = world.cloud.kube.clusters.values()
    return cluster


_CLI_WORLD: list[World] = []


def cli_compute() -> Compute:
    """`--app adopt_world:cli_compute`: the CLI's own Compute on the world's database and clock."""
    world = _CLI_WORLD[-1]
    return world.cloud.compute(world.compute.db.url, SECRET)


async def cli(world: World, *args: str, answer: str | None = None) -> Result:
    """Run `better-compute ARGS` as an operator would, against the world's deployment (in a thread: it runs its
    own event loop, as the command does); `answer` is what the operator types at its question."""
    _CLI_WORLD.append(world)
    try:
        return await asyncio.to_thread(
            CliRunner().invoke, app, [*args, "--tenant", world.tenant_id, "--app", "adopt_world:cli_compute"], answer
        )
    finally:
        _CLI_WORLD.pop()


async def plan_over_http(world: World, key: str, document: dict[str, Any], prune: bool = False) -> dict[str, Any]:
    """`POST /v1/fleet/plan` with the tenant's API key `key`: the plan's JSON, as a client reads it."""
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        answer = await http.post(
            "/v1/fleet/plan",
            json={"document": document, "prune": prune},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def plan_over_cli(world: World, tmp_path: Path, document: dict[str, Any], *flags: str) -> dict[str, Any]:
    """`better-compute fleet plan FILE --json` of a document with changes pending: the plan's JSON."""
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(document))
    result = await cli(world, "fleet", "plan", str(path), "--json", *flags)
    assert result.exit_code == 2, result.output  # 2: changes pending
    body: dict[str, Any] = json.loads(result.stdout)
    return body
