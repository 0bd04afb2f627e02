"""A substrate node joins only as the Node its pod's ServiceAccount token proves (DOKS world).

The join token is a Secret readable on every Node of the pool, so whoever reads it could
join under another Node's name, replace its credential and take its assignments. The
substrate has the cluster's TokenReview verify the pod's projected token, whose bound
claims name the Node, before it registers or matches the node.
"""

from __future__ import annotations

from typing import Any

import httpx
from e2e_world import World
from sqlalchemy import select

from better_compute.bcd.inventory import simulated_gpus
from better_compute.gateway.tables import NodeCredentialRow
from better_compute.kubernetes.names import JOIN_AUDIENCE
from better_compute.kubernetes.substrates.manifests import NAMESPACE, SERVICE_ACCOUNT
from better_compute.testing import KubeCluster
from better_compute.testing.kube.tokens import mint_account_token
from better_compute.wire.protocol import Inventory, JoinRequest, OsInfo


async def joined(world: World, count: int) -> bool:
    view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


def bcd_pod_on(cluster: KubeCluster, node_name: str) -> str:
    pods = cluster.store.list(cluster.resource("v1", "Pod"), NAMESPACE)
    (name,) = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node_name]
    return str(name)


def pod_token(cluster: KubeCluster, pod: str, audience: str = JOIN_AUDIENCE) -> str:
    """What the kubelet projects into that pod's identity volume (or, with another audience, a token for that)."""
    minted = mint_account_token(cluster, NAMESPACE, SERVICE_ACCOUNT, 3600, [audience], pod)
    return str(minted["status"]["token"])


async def credentials(world: World) -> dict[str, str]:
    async with world.compute.db.session() as session:
        rows = (await session.scalars(select(NodeCredentialRow))).all()
    return {row.node_id: row.credential_hash for row in rows}


async def test_a_join_under_another_nodes_name_is_refused(world: World) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="every Node joined")
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    members = {n.kubernetes_node_name: n for n in await world.compute.nodes.list(world.tenant_id)}
    victim, intruder = sorted(name for name in members if name)
    (cluster,) = world.cloud.kube.clusters.values()
    # Whoever reads the join Secret on a Node of the pool holds a valid join token.
    _, join_token = await world.compute.gateway.tokens.create(world.tenant_id, pool.id, uses=10)
    before = await credentials(world)

    async def join_as(name: str, identity_token: str | None) -> httpx.Response:
        inventory = Inventory(
            os=OsInfo(hostname=name, kubernetes_node_name=name, kernel="6.8.0", arch="x86_64"),
            gpus=simulated_gpus("8xH100", name),
        )
        request = JoinRequest(token=join_token, inventory=inventory, identity_token=identity_token)
        body: dict[str, Any] = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        async with httpx.AsyncClient(verify=False) as http:  # the test CA; what matters is the answer
            return await http.post(f"{world.cloud.control_plane.url}/v1/gateway/join", json=body)

    intruders_proof = pod_token(cluster, bcd_pod_on(cluster, intruder))
    refusals = {
        "no proof": await join_as(victim, None),
        "the intruder's own proof": await join_as(victim, intruders_proof),
        "a token for the API server": await join_as(
            victim, pod_token(cluster, bcd_pod_on(cluster, victim), "https://kubernetes.default.svc.cluster.local")
        ),
        "not a token at all": await join_as(victim, "e30.e30.forged-signature-000"),
    }
    for what, response in refusals.items():
        assert response.status_code == 403, (what, response.text)
        assert response.json()["error"]["code"] == "PERMISSION_DENIED", what
    assert f"names {intruder}, not {victim}" in refusals["the intruder's own proof"].json()["error"]["message"]
    assert "ServiceAccount token" in refusals["no proof"].json()["error"]["message"]
    assert await credentials(world) == before, "the victim's credential was not replaced"
    assert await world.compute.gateway.is_connected(members[victim].id)

    # The proof of its own Node lets a node join again under its name, connected or not.
    again = await join_as(intruder, intruders_proof)
    assert again.status_code == 200, again.text
    assert again.json()["nodeId"] == members[intruder].id
    after = await credentials(world)
    assert after[members[victim].id] == before[members[victim].id]
    assert after[members[intruder].id] != before[members[intruder].id]
