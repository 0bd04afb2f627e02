"""One cluster backs one pool (the spec's three checks), what each provider requires of an
adopted cluster, and moving a cluster to another pool; on DOKS unless the rule is EKS's."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from adopt_world import adopting, cli, only_kube, provider_cluster, ready_and_joined, seed, state_is, view
from e2e_world import SECRET, World

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet import fleet_module
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE, CLAIMED_ELSEWHERE
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.server import Compute, better_compute
from better_compute.vps import vps

OURS = ("Namespace", "ConfigMap", "Secret", "DaemonSet")
STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): an adopt, a provisioning or a teardown, whose checks are the end state."""


def ours_in(world: World, pool_id: str) -> list[str]:
    kube = only_kube(world)
    return [
        f"{kind} {o['metadata']['name']}"
        for kind in OURS
        for o in kube.objects(kind, labels={SUBSTRATE_POOL_LABEL: pool_id})
    ]


async def node_pools_of(world: World, adopt_id: str, pool_id: str) -> list[str]:
    state, _ = await provider_cluster(world, adopt_id)
    assert state is not None
    return [p for p in state.node_pools if p.startswith(f"bc-{pool_id[-6:]}-")]


async def archived(world: World) -> bool:
    return [p for p in await world.compute.pools.list(world.tenant_id) if p.name == "gpu-fleet"] == []


async def test_a_second_pool_on_the_same_account_and_cluster_is_refused_until_the_first_lets_go(world: World) -> None:
    adopt_id = await seed(world, "doks")
    first = adopting(world, "doks", adopt_id)
    await world.compute.fleet.apply(first, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), what="the first pool adopted", every=STEP)

    both = copy.deepcopy(first)
    both["pools"].append(adopting(world, "doks", adopt_id, pool="second")["pools"][0])
    with pytest.raises(ComputeError) as caught:
        await world.compute.fleet.plan(both, tenant_id=world.tenant_id)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert [p.path for p in caught.value.problems] == ["/pools/1/policy/substrate/cluster/adopt"]

    # Applied alone (the first pool stays: no prune), the plan sees the first pool and blocks the second.
    alone = adopting(world, "doks", adopt_id, pool="second")
    plan = await world.compute.fleet.plan(alone, tenant_id=world.tenant_id)
    (blocked,) = plan.blocked
    assert blocked.name == "second" and "gpu-fleet" in (blocked.reason or "")
    with pytest.raises(ComputeError) as refused:
        await world.compute.fleet.apply(alone, tenant_id=world.tenant_id)
    assert refused.value.code is ErrorCode.INVALID_STATE
    assert [p.name for p in await world.compute.pools.list(world.tenant_id)] == ["gpu-fleet"]
    assert (await view(world)).state == "ready", "the first pool is undisturbed"

    # Moving the cluster: archive the first pool, wait for it to be deleted, then adopt from the second.
    first_pool = (await view(world)).pool_id
    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.until(lambda: archived(world), minutes=60, what="the first pool's substrate deleted", every=STEP)
    await world.compute.fleet.apply(alone, tenant_id=world.tenant_id)
    await world.until(
        lambda: ready_and_joined(world, 1, "second"), minutes=60, what="adopted by the second pool", every=STEP
    )
    second = await view(world, "second")
    claim = only_kube(world).get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None and claim["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == second.pool_id
    assert await node_pools_of(world, adopt_id, first_pool) == []
    assert len(await node_pools_of(world, adopt_id, second.pool_id)) == 1


async def test_a_cluster_moves_to_another_pool_by_name_from_the_cli(world: World) -> None:
    adopt_id = await seed(world, "doks")
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id, pool="first"), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1, "first"), what="the first pool adopted", every=STEP)
    first = await view(world, "first")

    archived_now = await cli(world, "pools", "archive", "first")
    assert archived_now.exit_code == 0, archived_now.output
    assert f"pool first ({first.pool_id}) is archiving" in archived_now.stdout

    async def deleted_by_name() -> bool:
        read = await cli(world, "substrates", "get", "first", "--json")
        assert read.exit_code == 0, read.output  # readable by its name all along, archived at the end
        return bool(json.loads(read.stdout)["state"] == "deleted")

    await world.until(
        deleted_by_name, minutes=60, what="the first pool's substrate deleted, read by its name", every=STEP
    )
    assert [p.name for p in await world.compute.pools.list(world.tenant_id)] == []
    _, plain = await world.compute.iam.create_api_key(world.tenant_id)
    async with httpx.AsyncClient(verify=False) as http:  # the test CA; the body is what matters
        response = await http.get(
            f"{world.cloud.control_plane.url}/v1/pools/first/kubernetes-substrate",
            headers={"Authorization": f"Bearer {plain}"},
        )
    assert response.status_code == 200, response.text
    assert (response.json()["poolId"], response.json()["state"]) == (first.pool_id, "deleted"), "by name over HTTP"

    # The cluster moves: the second pool adopts it, and takes the first's name too.
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id, pool="first"), tenant_id=world.tenant_id)
    await world.until(
        lambda: ready_and_joined(world, 1, "first"), minutes=60, what="adopted again under the name", every=STEP
    )
    again = await view(world, "first")
    assert again.pool_id != first.pool_id
    by_name = json.loads((await cli(world, "substrates", "get", "first", "--json")).stdout)
    by_id = json.loads((await cli(world, "substrates", "get", first.pool_id, "--json")).stdout)
    assert (by_name["poolId"], by_name["state"]) == (again.pool_id, "ready"), "the reused name is the live pool's"
    assert (by_id["poolId"], by_id["state"]) == (first.pool_id, "deleted"), "the archived pool is read by its id"
    claim = only_kube(world).get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None and claim["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == again.pool_id


async def test_a_second_pool_through_another_account_is_refused_by_the_global_id(world: World) -> None:
    adopt_id = await seed(world, "doks")
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), what="the first pool adopted", every=STEP)

    other_token = "dop_v1_" + "ab" * 32
    world.cloud.doks.add_token(other_token)  # another API token of the same team: another provider account
    reference = await world.compute.secrets.create(world.tenant_id, other_token)
    document = adopting(world, "doks", adopt_id, pool="second")
    account = document["providerAccounts"][0]
    account["name"] = "other-k8s"
    account["config"]["token"] = reference
    document["pools"][0]["policy"]["substrate"]["account"] = "other-k8s"
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: state_is(world, "error", "second"), what="the second pool refused")

    second = await view(world, "second")
    assert second.cluster is not None and second.cluster.status == "error"
    assert "already backs pool" in (second.message or "")
    assert await node_pools_of(world, adopt_id, second.pool_id) == [], "nothing is created in the cluster"
    assert ours_in(world, second.pool_id) == []
    claim = only_kube(world).get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None and claim["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == (await view(world)).pool_id


@asynccontextmanager
async def second_deployment(world: World, path: Path, template: Path) -> AsyncIterator[tuple[Compute, str]]:
    """Another better-compute on a database of its own, reaching the same emulated clouds."""
    shutil.copy(template, path)
    providers = world.cloud.providers()
    compute = better_compute(
        database=f"sqlite:///{path}",
        secret=SECRET,
        clock=world.cloud.clock,
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=world.cloud.substrate_agent())),
            fleet_module(),
        ],
    )
    try:
        tenant = await compute.iam.create_tenant("another")
        yield compute, tenant.id
    finally:
        await compute.close()


async def test_a_second_deployment_is_refused_by_the_claim_and_never_applies_over_it(
    world: World, tmp_path: Path, sqlite_template: Path
) -> None:
    adopt_id = await seed(world, "doks")
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), what="the first pool adopted", every=STEP)
    kube = only_kube(world)
    claim = kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None
    first_pool = (await view(world)).pool_id

    async with second_deployment(world, tmp_path / "second.db", sqlite_template) as (other, tenant_id):
        document: dict[str, Any] = adopting(world, "doks", adopt_id)
        reference = await other.secrets.create(tenant_id, world.cloud.doks_token)
        document["providerAccounts"][0]["config"]["token"] = reference
        await other.fleet.apply(document, tenant_id=tenant_id)

        async def refused() -> bool:
            current = await other.kubernetes_substrates.get(tenant_id=tenant_id, pool_id="gpu-fleet")
            return current.state == "error" and "claimed by pool" in (current.message or "")

        for _ in range(60):
            await other.run_until_idle(until=world.cloud.clock.now())
            await world.step(5)
            if await refused():
                break
        assert await refused(), "the second deployment is refused by the in-cluster claim"
        theirs = await other.kubernetes_substrates.get(tenant_id=tenant_id, pool_id="gpu-fleet")
        assert first_pool in (theirs.message or "")
        retrying = [  # the refusal is a failure the engine counts and retries, so doctor names it
            f
            for f in await other.doctor()
            if f.code == "engine.item-retrying" and f"kubernetes.substrate/{theirs.pool_id}" in f.message
        ]
        assert len(retrying) == 1 and "claimed by pool" in retrying[0].message
        assert theirs.next_attempt_at is not None and theirs.updated_at is not None
        assert theirs.next_attempt_at - theirs.updated_at == timedelta(minutes=2), "the engine's adopt retry"
        after = kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
        assert after is not None and after["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
        assert after["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == first_pool, "never applied over"
        assert await node_pools_of(world, adopt_id, theirs.pool_id) == [], "no node pool before the claim"
        assert ours_in(world, theirs.pool_id) == [], "no bcd before the claim"

        # Its teardown removes nothing: it never held the claim, and leaves bc-substrate to its holder.
        await other.fleet.archive_pool("gpu-fleet", tenant_id=tenant_id)
        for _ in range(60):
            await other.run_until_idle(until=world.cloud.clock.now())
            await world.step(5)
            if await other.pools.list(tenant_id) == []:
                break
        assert await other.pools.list(tenant_id) == []
        assert kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is not None
        assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None
    await world.step(120)
    assert (await view(world)).state == "ready", "the first deployment's pool is undisturbed"


async def test_a_cluster_better_compute_created_is_claimed_and_another_deployment_cannot_adopt_it(
    world: World, tmp_path: Path, sqlite_template: Path
) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(
        lambda: ready_and_joined(world, 2), what="the created cluster ready, its Nodes joined", every=STEP
    )
    first = await view(world)
    assert first.mode == "create" and first.cluster is not None and first.cluster.provider_cluster_id
    created_id = first.cluster.provider_cluster_id
    kube = only_kube(world)
    claim = kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None, "a created cluster carries the in-cluster claim too"
    assert claim["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == first.pool_id
    before = sorted((await provider_cluster(world, created_id))[0].node_pools)  # type: ignore[union-attr]

    async with second_deployment(world, tmp_path / "second.db", sqlite_template) as (other, tenant_id):
        document: dict[str, Any] = adopting(world, "doks", created_id)
        document["providerAccounts"][0]["config"]["token"] = await other.secrets.create(
            tenant_id, world.cloud.doks_token
        )
        await other.fleet.apply(document, tenant_id=tenant_id)

        async def refused() -> bool:
            current = await other.kubernetes_substrates.get(tenant_id=tenant_id, pool_id="gpu-fleet")
            return current.state == "error" and CLAIMED_ELSEWHERE in (current.message or "")

        for _ in range(60):
            await other.run_until_idle(until=world.cloud.clock.now())
            await world.step(5)
            if await refused():
                break
        assert await refused(), "the second deployment is refused by the in-cluster claim (claimedElsewhere)"
        theirs = await other.kubernetes_substrates.get(tenant_id=tenant_id, pool_id="gpu-fleet")
        assert first.pool_id in (theirs.message or "")
        after = kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
        assert after is not None and after["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
        assert sorted((await provider_cluster(world, created_id))[0].node_pools) == before, "no node pool added"  # type: ignore[union-attr]
        assert ours_in(world, theirs.pool_id) == [], "no bcd applied"
    await world.step(120)
    assert (await view(world)).state == "ready", "the first deployment's pool is undisturbed"

    # Teardown releases the claim with the cluster it created, and nothing is left at the provider.
    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.until(lambda: archived(world), minutes=120, what="the created cluster torn down", every=STEP)
    assert (await provider_cluster(world, created_id))[0] is None
    assert world.cloud.kube.clusters == {}, "the claim went with the cluster"


async def plan_problem(world: World, document: dict[str, Any]) -> str:
    """The plan's one problem, at the adopt id."""
    with pytest.raises(ComputeError) as caught:
        await world.compute.fleet.plan(document, tenant_id=world.tenant_id)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    (problem,) = caught.value.problems
    assert problem.path == "/pools/0/policy/substrate/cluster/adopt"
    return problem.message


async def test_gpu_node_pools_are_refused_while_doks_device_plugins_are_on(world: World) -> None:
    adopt_id = await seed(world, "doks", nvidia_gpu_device_plugin=True)
    document = adopting(world, "doks", adopt_id)
    assert "devicePluginOn" in await plan_problem(world, document), "the plan says it first"

    # The owner turns the plugins off for the plan, and on again before the node pool is made.
    cluster = world.cloud.doks.clusters[adopt_id]
    cluster.nvidia_gpu_device_plugin = False
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    cluster.nvidia_gpu_device_plugin = True
    await world.until(lambda: state_is(world, "error"), what="the GPU flavor refused")
    current = await view(world)
    assert "devicePluginOn" in (current.message or "")
    assert await node_pools_of(world, adopt_id, current.pool_id) == []


async def test_an_eks_cluster_without_the_admin_access_entry_is_explained(world: World) -> None:
    adopt_id = await seed(world, "eks")
    document = adopting(world, "eks", adopt_id)
    eks_cluster = world.cloud.eks.cluster("theirs")
    assert eks_cluster is not None
    entries = dict(eks_cluster.access_entries)
    eks_cluster.access_entries.clear()  # the tenant has not granted it (yet)
    message = await plan_problem(world, document)
    assert "no-admin-access-entry" in message and "AmazonEKSClusterAdminPolicy" in message, "the plan says it first"

    eks_cluster.access_entries.update(entries)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    eks_cluster.access_entries.clear()  # taken away again before the substrate's first run
    await world.until(lambda: state_is(world, "error"), what="the adopt refused")
    current = await view(world)
    assert "no-admin-access-entry" in (current.message or "")
    assert "AmazonEKSClusterAdminPolicy" in (current.message or "")
    assert current.cluster is not None and current.cluster.status == "error"
    state, _ = await provider_cluster(world, adopt_id)
    assert state is not None and not [p for p in state.node_pools if p.startswith("bc-")]


async def test_a_pool_of_another_tenant_holding_the_cluster_is_not_named_to_this_one(world: World) -> None:
    """The global id is the same cluster whoever reaches it, so a second tenant is refused too; the
    refusal says a pool of another tenant holds it, never which (pool ids are another tenant's data)."""
    adopt_id = await seed(world, "doks")
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), what="the first tenant's pool adopted", every=STEP)
    first = await view(world)

    other = (await world.compute.iam.create_tenant("globex")).id
    other_token = "dop_v1_" + "cd" * 32
    world.cloud.doks.add_token(other_token)  # the other tenant's own API token for the same team
    document = adopting(world, "doks", adopt_id, pool="theirs-too")
    document["providerAccounts"][0]["config"]["token"] = await world.compute.secrets.create(other, other_token)
    await world.compute.fleet.apply(document, tenant_id=other)

    async def refused() -> bool:
        current = await world.compute.kubernetes_substrates.get(tenant_id=other, pool_id="theirs-too")
        return str(current.state) == "error"

    await world.until(refused, what="the other tenant's pool refused")
    current = await world.compute.kubernetes_substrates.get(tenant_id=other, pool_id="theirs-too")
    assert "already backs a pool of another tenant" in (current.message or ""), current.message
    assert first.pool_id not in (current.message or "") and first.pool_id not in repr(current)
    assert await node_pools_of(world, adopt_id, current.pool_id) == [], "nothing is created in the cluster"
