"""A driver that reports no `outputs.globalId` (the spec: a driver "should"): the conformance kit notes it and
passes, and a second pool reaching the cluster through another account is still refused, by the in-cluster claim."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from adopt_world import adopting, only_kube, provider_cluster, ready_and_joined, seed, state_is, view
from e2e_world import SECRET, World
from lightkube import ApiError
from lightkube.resources.core_v1 import Namespace

from better_compute.core.conformance import run_conformance
from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE, CLAIMED_ELSEWHERE
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import Accelerators, ClusterCredentials, ClusterSpec, ClusterState
from better_compute.providers.digitalocean import DoksKubernetes
from better_compute.providers.digitalocean.account import DoksAccountConfig
from better_compute.providers.digitalocean.client import DoApi
from better_compute.testing.conformance_kubernetes import (
    KubernetesSubject,
    PoolShape,
    kubernetes_provider_conformance_cases,
)
from better_compute.testing.conformance_kubernetes_clusters import NO_GLOBAL_ID
from better_compute.vps.provider import ProviderAccount, ProviderImpl


def _anonymous(state: ClusterState | None) -> ClusterState | None:
    if state is None or state.outputs is None:
        return state
    return replace(state, outputs=replace(state.outputs, global_id=""))


class WithoutGlobalId(DoksKubernetes):
    """The DOKS driver as a provider that has no provider-global cluster id to report."""

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        state = await super().ensure_cluster(account, spec)
        return _anonymous(state) or state

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        return _anonymous(await super().get_cluster(account, cluster_id))

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        return _anonymous(await super().find_cluster(account, name, location))

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        state = await super().read_adoptable(account, adopt_id)
        return _anonymous(state) or state


@pytest.fixture
async def without_global_id(world: World) -> AsyncIterator[ProviderImpl]:
    provider = ProviderImpl(
        name="digitalocean",
        kubernetes=WithoutGlobalId(DoApi(world.cloud.doks.url, max_workers=4), world.cloud.clock),
        account_config=DoksAccountConfig,
    )
    try:
        yield provider
    finally:
        await provider.aclose()


async def test_the_kit_notes_a_missing_global_id_and_passes(world: World, without_global_id: ProviderImpl) -> None:
    cloud = world.cloud
    adoptable = await seed(world, "doks", name="users-own")

    async def resolve(reference: str) -> str:
        return cloud.doks_token

    async def accepts(credentials: ClusterCredentials) -> bool:
        """Minted by the emulator, and the cluster's API server answers a request made with it."""
        if credentials.token not in cloud.doks.issued:
            return False
        client = kube_client(credentials)
        try:
            namespaces = [ns async for ns in client.list(Namespace)]
        except ApiError:
            return False
        finally:
            await client.close()
        return bool(namespaces)

    def subject() -> KubernetesSubject:
        return KubernetesSubject(
            provider=without_global_id,
            config={"token": world.doks_token_ref, "regions": ["tor1"], "allowSpot": True, "previews": True},
            location="tor1",
            node_pool=PoolShape("s-2vcpu-4gb", 1),
            gpu_node_pool=PoolShape("gpu-h100x8-640gb", 1, Accelerators("nvidia-h100", 8)),
            accepts=accepts,
            zero_nodes=False,
            upgrade_from="1.32",
            upgrade_to="1.33",
            adoptable=adoptable,
            absent_adoptable=str(uuid.uuid4()),
            clock=cloud.clock,
            advance=cloud.advance,
            resolve_secret=resolve,
            tenant_id=world.tenant_id,
        )

    report = await run_conformance(kubernetes_provider_conformance_cases(), subject)

    assert report.passed, report.render()
    assert report.findings == (("cluster-created-idempotently", NO_GLOBAL_ID), ("adopt-read-and-extend", NO_GLOBAL_ID))
    assert f"  note: {NO_GLOBAL_ID}" in report.render()


async def test_without_a_global_id_the_in_cluster_claim_refuses_a_second_adoption(
    world: World, without_global_id: ProviderImpl
) -> None:
    url = world.compute.db.url
    gcp, aws, _ = world.cloud.providers()
    await world.compute.close()
    world.compute = world.cloud.compute(url, SECRET, providers=[gcp, aws, without_global_id])
    world.cloud.serve(world.compute)
    adopt_id = await seed(world, "doks")
    await world.compute.fleet.apply(adopting(world, "doks", adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), what="the first pool adopted")
    first = await view(world)

    other_token = "dop_v1_" + "cd" * 32
    world.cloud.doks.add_token(other_token)  # another API token of the same team: another provider account
    document = adopting(world, "doks", adopt_id, pool="second")
    account = document["providerAccounts"][0]
    account["name"] = "other-k8s"
    account["config"]["token"] = await world.compute.secrets.create(world.tenant_id, other_token)
    document["pools"][0]["policy"]["substrate"]["account"] = "other-k8s"
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: state_is(world, "error", "second"), what="the second pool refused")

    second = await view(world, "second")
    assert CLAIMED_ELSEWHERE in (second.message or "") and first.pool_id in (second.message or "")
    state, _ = await provider_cluster(world, adopt_id)
    assert state is not None and not any(p.startswith(f"bc-{second.pool_id[-6:]}-") for p in state.node_pools)
    claim = only_kube(world).get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None and claim["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == first.pool_id
    assert (await view(world)).state == "ready", "the first pool is undisturbed"
