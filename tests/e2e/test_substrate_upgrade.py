"""Upgrades that drain, on GKE, EKS and DOKS: the control plane, then each Node one at a time, never a booking cut.

The upgrade is asked over HTTP, the drain is watched in the state read, and the versions are read back
at the emulators (through the driver's real API calls) and on the Nodes' kubelets. The store's part
(the progress on the cluster's row) is the same for every provider, so PostgreSQL runs one of them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from e2e_world import SECRET, World

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet import fleet_module
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.provider import version_matches
from better_compute.server import better_compute
from better_compute.testing.doks.catalog import VERSIONS
from better_compute.vps import vps

TARGET = {"gke": "1.31", "eks": "1.32", "doks": "1.33"}
"""The version each emulator offers the cluster the example makes (GKE 1.30, EKS 1.31, DOKS 1.32)."""


STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): provisioning, whose check is the end state."""


async def substrate(world: World) -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")


async def joined(world: World, count: int) -> bool:
    try:
        view = await substrate(world)
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_listed) == count == len(view.nodes_joined)


def node(world: World, name: str) -> dict[str, Any]:
    cluster = world.kube_cluster_of(name)
    found: dict[str, Any] = cluster.store.get(cluster.resource("v1", "Node"), "", name)
    return found


def kubelet(world: World, name: str) -> str:
    return str(node(world, name)["status"]["nodeInfo"]["kubeletVersion"])


def unschedulable(world: World, name: str) -> bool:
    return bool(node(world, name)["spec"].get("unschedulable"))


async def restart(world: World) -> None:
    """The control plane's process stops, and a new one starts on the same database."""
    url = world.compute.db.url
    await world.compute.close()
    providers = world.cloud.providers()
    world.compute = better_compute(
        database=url,
        secret=SECRET,
        clock=world.cloud.clock,
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=world.cloud.substrate_agent())),
            fleet_module(),
        ],
    )
    world.cloud.serve(world.compute)


async def refused(world: World, cluster_id: str, version: str) -> ComputeError:
    with pytest.raises(ComputeError) as caught:
        await world.compute.kubernetes_clusters.upgrade(
            tenant_id=world.tenant_id, cluster_id=cluster_id, version=version
        )
    return caught.value


@pytest.mark.parametrize(
    ("database_url", "provider"),
    [("sqlite", "gke"), ("sqlite", "eks"), ("sqlite", "doks"), ("postgres", "doks")],
    indirect=["database_url"],
)
async def test_an_upgrade_drains_node_by_node_and_waits_for_the_booking(world: World, provider: str) -> None:
    document = world.document(provider)
    if provider == "eks":
        document["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = 1  # one per zone, two zones
    if provider == "doks":
        world.cloud.doks.versions = VERSIONS[:-1]  # made at 1.32; DigitalOcean releases 1.33 below
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined", every=STEP)
    world.cloud.doks.versions = VERSIONS
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    (cluster,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    listed = list((await substrate(world)).nodes_listed)
    before = {name: kubelet(world, name) for name in listed}
    assert not any(version_matches(v, TARGET[provider]) for v in before.values())

    # refused asks change nothing
    unknown = await refused(world, "kcl_nope", TARGET[provider])
    assert (unknown.code, unknown.path) == (ErrorCode.NOT_FOUND, "/clusterId")
    for bad in ("banana", "1.29"):
        error = await refused(world, cluster.id, bad)
        assert (error.code, error.path) == (ErrorCode.INVALID_INPUT, "/version"), error.message
    assert (await substrate(world)).upgrade is None

    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    booked = (await world.compute.nodes.get(world.tenant_id, reservation.node_id)).kubernetes_node_name
    assert booked in listed
    (peer,) = [
        m for m in await world.compute.nodes.list(world.tenant_id, pool_id=pool.id) if m.id != reservation.node_id
    ]
    await world.compute.nodes.cordon(world.tenant_id, peer.id)  # the operator's own: the upgrade keeps it

    key, plain = await world.compute.iam.create_api_key(world.tenant_id)
    async with httpx.AsyncClient(verify=False, base_url=world.cloud.control_plane.url) as http:
        headers = {"Authorization": f"Bearer {plain}"}
        path = f"/v1/kubernetes/clusters/{cluster.id}/upgrade"
        started = await http.post(path, json={"version": TARGET[provider]}, headers=headers)
        assert started.status_code == 202, started.text
        assert started.json()["upgradingTo"] == TARGET[provider]
        again = await http.post(path, json={"version": TARGET[provider]}, headers=headers)
        assert again.status_code == 202 and again.json()["upgradingTo"] == TARGET[provider], "the same ask: no-op"
        another = await http.post(path, json={"version": "1.99"}, headers=headers)
        assert another.status_code in (400, 409, 422) and "/version" in another.text
    del key

    async def waiting_for_the_booking() -> bool:
        upgrade = (await substrate(world)).upgrade
        return bool(upgrade and booked in upgrade["nodesDraining"] and "booking" in (upgrade["message"] or ""))

    await world.until(waiting_for_the_booking, minutes=60, what="the drain waits for the booked node", every=30)
    await world.step(300)  # five minutes on, the booking still holds the upgrade
    upgrade = (await substrate(world)).upgrade
    assert upgrade["from"] == cluster.version and upgrade["to"] == TARGET[provider]
    assert booked in (upgrade["message"] or "") and "force" in (upgrade["message"] or "")
    assert upgrade["nodesDraining"] == [n for n in listed if n <= booked], "drained one at a time, in order"
    assert upgrade["nodesWaiting"] == [n for n in listed if n > booked]
    assert upgrade["nodesDone"] == []
    assert (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "active"
    assert (await world.compute.nodes.get(world.tenant_id, reservation.node_id)).state == "cordoned"
    assert unschedulable(world, booked)
    assert not any(unschedulable(world, n) for n in upgrade["nodesWaiting"]), "not cordoned before its turn"
    assert (await world.compute.nodes.get(world.tenant_id, peer.id)).state == "cordoned"
    assert {n: kubelet(world, n) for n in listed} == before, "no node is upgraded while a booking waits"

    await restart(world)
    assert (await substrate(world)).upgrade == upgrade, "the progress outlives the process"
    await world.compute.reservations.release(world.tenant_id, reservation.id)

    async def finished() -> bool:
        return (await substrate(world)).upgrade is None

    await world.until(finished, minutes=120, what="the upgrade finished", every=30)
    assert all(version_matches(kubelet(world, n), TARGET[provider]) for n in listed), "every kubelet upgraded"
    assert not any(unschedulable(world, n) for n in listed), "every Node uncordoned"
    members = await world.compute.nodes.list(world.tenant_id, pool_id=pool.id)
    assert sorted(m.kubernetes_node_name or "" for m in members) == listed
    states = {m.id: m.state for m in members}
    assert states == {reservation.node_id: "ready", peer.id: "cordoned"}, "the operator's cordon stays"

    async def reconnected() -> bool:
        return all(m.connected for m in await world.compute.nodes.list(world.tenant_id, pool_id=pool.id))

    await world.until(reconnected, minutes=10, what="bcd reconnected to the restarted control plane")
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await k.account(world.tenant_id, "managed-k8s")
    provider_id = cluster.provider_cluster_id or ""
    state = await driver.get_cluster(account, provider_id)
    assert state is not None and state.outputs is not None
    assert version_matches(state.outputs.version, TARGET[provider]), "the control plane at the emulator"
    (pool_name,) = [p.name for p in cluster.node_pools]
    at_provider = await driver.upgrade_node_pool(account, provider_id, pool_name, TARGET[provider])
    assert at_provider.version is not None and version_matches(at_provider.version, TARGET[provider])
    (after,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    assert after.upgrading_to is None and version_matches(after.version or "", TARGET[provider])
    again_record = await world.compute.kubernetes_clusters.upgrade(
        tenant_id=world.tenant_id, cluster_id=cluster.id, version=TARGET[provider]
    )
    assert again_record.upgrading_to is None, "already there: a no-op"
    booking = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert booking.state == "active", "the upgraded nodes take bookings again"
