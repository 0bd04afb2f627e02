"""Each substrate run mints its own admin credential; a join's identity check works as the join reviewer.

The spec: "each run mints a 600 s admin credential ... held in memory for that run only". A
join is not a run: its TokenReview is made as `bc-system/bcd-join-reviewer`, which the
cluster lets create TokenReviews and nothing else (DOKS world).
"""

from __future__ import annotations

from typing import Any

import httpx
from e2e_world import World

from better_compute.kubernetes.calls import CALLS
from better_compute.kubernetes.cluster_access.join_reviewer import REVIEWER, REVIEWER_ROLE
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.substrates.manifests import NAMESPACE
from better_compute.testing import KubeCluster
from better_compute.testing.kube.tokens import mint_account_token


async def joined(world: World, count: int) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except Exception:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


def only_cluster(world: World) -> KubeCluster:
    (cluster,) = world.cloud.kube.clusters.values()
    return cluster


async def test_every_run_mints_its_own_admin_credential(world: World) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="every Node joined", every=30)
    await world.step(600)  # the joins are over: from here on only runs mint
    before = CALLS.snapshot()
    await world.step(600)
    made = CALLS.since(before)
    runs = sum(n for c, n in made.items() if c.api == "kubernetes" and c.method == "GET daemonsets")  # bcd's, read
    mints = sum(n for c, n in made.items() if c.api != "kubernetes" and c.method == "credentials")
    assert runs >= 5, made  # a settled substrate looks every minute
    assert mints == runs, f"{mints} admin credentials minted for {runs} runs"


async def as_token(cluster: KubeCluster, token: str, method: str, path: str, body: Any = None) -> int:
    async with httpx.AsyncClient(base_url=cluster.endpoint, verify=False) as client:
        answer = await client.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})
    return answer.status_code


async def test_a_join_is_reviewed_by_an_identity_that_can_do_only_that(world: World) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="every Node joined", every=30)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    cluster = only_cluster(world)
    role = cluster.get_object("ClusterRole", REVIEWER_ROLE)
    assert role is not None and role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    ]
    binding = cluster.get_object("ClusterRoleBinding", REVIEWER_ROLE)
    assert binding is not None
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": REVIEWER, "namespace": NAMESPACE}]
    for obj in (role, binding, cluster.get_object("ServiceAccount", REVIEWER, NAMESPACE)):
        assert obj is not None and obj["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == pool.id

    token = str(mint_account_token(cluster, NAMESPACE, REVIEWER, 600)["status"]["token"])
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "x"}}
    assert await as_token(cluster, token, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", review) == 201
    assert await as_token(cluster, token, "GET", "/api/v1/nodes") == 403, "one Node is read, never the list"
    assert await as_token(cluster, token, "GET", f"/api/v1/nodes/{cluster.kubelet.node_names[0]}") == 200
    assert await as_token(cluster, token, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets") == 403

    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)

    async def archived() -> bool:
        return await world.compute.pools.list(world.tenant_id) == []

    await world.until(archived, minutes=120, what="archived", every=30)
    for kube in world.cloud.kube.clusters.values():  # the cluster is deleted; if it lingers, nothing of ours is in it
        assert kube.get_object("ClusterRoleBinding", REVIEWER_ROLE) is None
