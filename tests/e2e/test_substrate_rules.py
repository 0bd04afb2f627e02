"""One test per rule of the substrate, each of which fails if the rule breaks (DOKS, the simplest world)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import httpx
import pytest
from e2e_world import SECRET, World
from sqlalchemy import text

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.calls import CALLS
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.substrates.manifests import DAEMON_SET, JOIN_SECRET, NAMESPACE
from better_compute.kubernetes.substrates.reconciler import WATCH_SECONDS
from better_compute.testing import KubeCluster

SUBSTRATE = "/pools/0/policy/substrate"
COARSE = 30.0
"""How often (simulated seconds) a wait with no time bound on what it waits for looks again: a cluster
takes 6 minutes and a node 3, and a look costs as much as a step."""


async def view(world: World) -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")


async def joined(world: World, count: int) -> bool:
    try:
        current = await view(world)
    except Exception:
        return False
    return current.state == "ready" and len(current.nodes_joined) == count == len(current.nodes_listed)


async def up(world: World, document: dict[str, Any] | None = None, nodes: int = 2) -> Any:
    await world.compute.fleet.apply(document or world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, nodes), minutes=60, what="every Node joined", every=COARSE)
    return await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")


def kube_of(world: World) -> KubeCluster:
    (cluster,) = world.cloud.kube.clusters.values()
    return cluster


def stored(cluster: KubeCluster, version: str, kind: str, namespace: str, name: str) -> Any:
    return cluster.store.get(cluster.resource(version, kind), namespace, name)


async def test_the_token_is_revoked_and_its_secret_deleted_once_every_node_joined(world: World) -> None:
    pool = await up(world)
    await world.step(120)  # the next run sees every Node joined
    cluster = kube_of(world)
    assert stored(cluster, "v1", "Secret", NAMESPACE, JOIN_SECRET) is None
    assert stored(cluster, "apps/v1", "DaemonSet", NAMESPACE, DAEMON_SET) is not None
    async with world.compute.db.session() as session:
        tokens = (
            await session.execute(
                text("SELECT uses, revoked_at FROM gateway_join_tokens WHERE pool_id = :p"), {"p": pool.id}
            )
        ).all()
    assert tokens and all(t.revoked_at is not None for t in tokens), "every token of the pool is revoked"
    assert sum(t.uses for t in tokens) == 2, "one use per Node"


async def test_a_converged_run_makes_no_provider_write_and_no_kubernetes_write(world: World) -> None:
    await up(world)
    await world.step(600)  # let every pending requeue pass
    before = CALLS.snapshot()
    await world.step(120)
    made = CALLS.since(before)
    provider_writes = {c: n for c, n in made.items() if c.api != "kubernetes" and c.access == "write"}
    kube_writes = {c.method for c in made if c.api == "kubernetes" and c.access == "write"}
    assert provider_writes == {}
    assert kube_writes == set(), "bcd's objects are as applied: none is applied again (test_converged_quiet.py)"
    assert any(c.api == "kubernetes" and c.method == "GET daemonsets" for c in made), "bcd is looked at"


async def test_quota_is_refunded_once_when_a_spot_node_is_reclaimed(world: World) -> None:
    document = world.document("doks")
    document["providerAccounts"][0]["config"].update({"allowSpot": True, "previews": True})
    document["pools"][0]["policy"]["substrate"]["flavors"][0]["spot"] = True
    pool = await up(world, document)
    await world.compute.quotas.set(world.tenant_id, "H100", 16)
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8, spot=True)
    assert (await world.compute.quotas.usage(world.tenant_id, "H100"))[0].used == 8
    node = await world.compute.nodes.get(world.tenant_id, reservation.node_id)
    view_now = await view(world)
    await world.cloud.doks.faults.reclaim_spot(view_now.cluster.provider_cluster_id, node.kubernetes_node_name)

    async def preempted() -> bool:
        return (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "preempted"

    await world.until(preempted, minutes=10, what="preempted", every=COARSE)
    await world.step(300)  # more runs: nothing refunds twice
    assert (await world.compute.quotas.usage(world.tenant_id, "H100"))[0].used == 0


async def test_teardown_cordons_then_waits_for_bookings_and_releases_nothing(world: World) -> None:
    pool = await up(world)
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)
    await world.step(600)
    members = await world.compute.nodes.list(world.tenant_id, pool_id=pool.id)
    assert members and all(n.state == "cordoned" for n in members)
    cluster = kube_of(world)
    ours = [stored(cluster, "v1", "Node", "", name) for name in cluster.kubelet.node_names]
    ours = [n for n in ours if n["metadata"]["labels"].get(SUBSTRATE_POOL_LABEL) == pool.id]
    assert len(ours) == 2 and all(n["spec"].get("unschedulable") is True for n in ours)
    current = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool.id)
    assert current.state == "deleting" and "waiting for 1 booking" in (current.message or "")
    assert (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "active"
    assert stored(cluster, "apps/v1", "DaemonSet", NAMESPACE, DAEMON_SET) is not None, "bcd stays while booked"
    await world.compute.reservations.release(world.tenant_id, reservation.id)

    async def archived() -> bool:
        return (await world.compute.pools.get(world.tenant_id, pool.id)).state == "archived"

    await world.until(archived, minutes=60, what="archived", every=COARSE)
    assert world.cloud.kube.clusters == {} or all(
        stored(c, "apps/v1", "DaemonSet", NAMESPACE, DAEMON_SET) is None for c in world.cloud.kube.clusters.values()
    )


async def test_a_refused_flavor_is_an_error_while_joined_nodes_are_still_served(world: World) -> None:
    pool = await up(world)
    world.cloud.doks.faults.stockout("gpu-h200x8-1128gb")
    document = world.document("doks")
    flavors = document["pools"][0]["policy"]["substrate"]["flavors"]
    flavors.append(
        {"name": "h200", "machineType": "gpu-h200x8-1128gb", "nodes": 1, "gpus": {"type": "nvidia-h200", "count": 8}}
    )
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)

    async def errored() -> bool:
        return (await view(world)).state == "error"

    await world.until(errored, minutes=30, what="error", every=COARSE)
    current = await view(world)
    assert "h200" in (current.message or "") and len(current.nodes_joined) == 2
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert reservation.state == "active"


async def test_nodes_that_do_not_join_for_15_minutes_are_reported(world: World) -> None:
    from better_compute.fleet import fleet_module
    from better_compute.kubernetes import SubstrateConfig, kubernetes
    from better_compute.kubernetes.agent import substrate_agent
    from better_compute.server import better_compute
    from better_compute.vps import vps

    plane = world.cloud.control_plane
    wrong_pin = substrate_agent(
        image="bcd:dev",
        gateway_url=plane.gateway_url,
        pins=("sha256/" + "A" * 43 + "=",),
        control_plane_url=plane.url,
        ca_pem=plane.ca_pem,
    )
    providers = world.cloud.providers()
    await world.compute.close()
    world.compute = better_compute(
        database=world.compute.db.url,
        secret="e2e-server-secret-0123456789abcdef0123",
        clock=world.cloud.clock,
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=wrong_pin)),
            fleet_module(),
        ],
    )
    world.cloud.serve(world.compute)
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)

    async def listed() -> bool:
        try:
            return len((await view(world)).nodes_listed) == 2
        except Exception:
            return False

    await world.until(listed, minutes=60, what="Nodes listed", every=COARSE)
    since = (await view(world)).waiting_to_join.since
    assert since is not None
    codes = {f.code for f in await world.compute.doctor()}
    assert "kubernetes.substrate-nodes-not-joining" not in codes
    world.cloud.clock.advance_to(since + timedelta(minutes=14, seconds=59))
    assert "kubernetes.substrate-nodes-not-joining" not in {f.code for f in await world.compute.doctor()}
    await world.step(61)
    current = await view(world)
    assert current.state == "ready" and current.waiting_to_join.count == 2
    assert "bc-system/bcd" in (current.message or "") and "pins" in (current.message or "")
    assert "kubernetes.substrate-nodes-not-joining" in {f.code for f in await world.compute.doctor()}


async def test_without_an_agent_nothing_is_created_and_a_server_started_with_one_wakes_the_pool(world: World) -> None:
    from better_compute.fleet import fleet_module
    from better_compute.kubernetes import kubernetes
    from better_compute.server import better_compute
    from better_compute.vps import vps

    url = world.compute.db.url
    providers = world.cloud.providers()
    await world.compute.close()
    world.compute = better_compute(
        database=url,
        secret=SECRET,
        clock=world.cloud.clock,
        modules=[vps(providers=providers), kubernetes(providers=providers), fleet_module()],
    )
    assert "kubernetes.substrate-agent-missing" in {f.code for f in world.compute.self_check()}
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.step(3600)
    current = await view(world)
    assert current.state == "error" and "substrate-agent-missing" in (current.message or "")
    assert current.cluster is None and world.cloud.doks.clusters == {}, "nothing is made at the provider"
    assert await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) == []

    # The server is restarted with an agent, on the same database; the document is not applied again.
    await world.compute.close()
    world.compute = world.cloud.compute(url, SECRET)
    world.cloud.serve(world.compute)
    await world.compute.start()
    try:
        for _ in range(2000):  # the started server's workers, with the simulated clock standing still
            if (await view(world)).state != "error":
                break
            await asyncio.sleep(0.01)
        assert (await view(world)).state == "provisioning", "the server started with an agent woke the substrate"
    finally:
        await world.compute.close()
    world.compute = world.cloud.compute(url, SECRET)
    world.cloud.serve(world.compute)
    await world.until(lambda: joined(world, 2), minutes=60, what="the pool recovered by itself", every=COARSE)


async def test_a_stockout_and_a_quota_that_go_away_recover_without_a_document_change(world: World) -> None:
    world.cloud.doks.faults.stockout("gpu-h100x8-640gb")
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)

    async def refused(why: str) -> bool:
        current = await view(world)
        return current.state == "error" and why in (current.message or "")

    await world.until(lambda: refused("not available"), minutes=60, what="the stockout in the message", every=COARSE)
    world.cloud.doks.faults.stockout("gpu-h100x8-640gb", out=False)
    world.cloud.doks.faults.quota(1)
    await world.until(lambda: refused("limit"), minutes=60, what="the quota in the message", every=COARSE)
    assert len((await view(world)).nodes_joined) == 0
    world.cloud.doks.faults.quota(None)
    await world.until(lambda: joined(world, 2), minutes=60, what="the pool recovered by itself", every=COARSE)


async def test_no_credential_or_token_reaches_the_state_read_the_database_or_the_logs(
    world: World, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="better_compute.bcd")  # bcd's own, which the pod runtime keeps at INFO
    seen: list[str] = [world.cloud.doks_token]
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    driver = k.drivers["digitalocean"]
    mint = driver.credentials

    async def recording(account: Any, cluster_id: str) -> Any:
        credentials = await mint(account, cluster_id)
        seen.append(credentials.token)
        return credentials

    monkeypatch.setattr(driver, "credentials", recording)
    from better_compute.kubernetes.substrates import join_step

    made = join_step.join_secret

    def recording_secret(pool_id: str, token_id: str, token: str) -> dict[str, Any]:
        seen.append(token)
        return made(pool_id, token_id, token)

    monkeypatch.setattr(join_step, "join_secret", recording_secret)
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="joined", every=COARSE)
    assert len(seen) >= 3, "a credential and a join token were minted"
    key, plain = await world.compute.iam.create_api_key(world.tenant_id)
    async with httpx.AsyncClient(verify=False) as http:  # the test CA; the body is what matters
        response = await http.get(
            f"{world.cloud.control_plane.url}/v1/pools/gpu-fleet/kubernetes-substrate",
            headers={"Authorization": f"Bearer {plain}"},
        )
    assert response.status_code == 200, response.text
    async with world.compute.db.session() as session:
        tables = (
            (
                await session.execute(
                    text("SELECT name FROM sqlite_master WHERE type='table'")
                    if not world.compute.db.is_postgres
                    else text("SELECT tablename FROM pg_tables WHERE schemaname='public'")
                )
            )
            .scalars()
            .all()
        )
        dump = ""
        for table in tables:
            rows = (await session.execute(text(f'SELECT * FROM "{table}"'))).all()
            dump += repr(rows)
    read = repr(await view(world)) + response.text
    for value in seen:
        assert value not in dump, "never stored"
        assert value not in caplog.text, "never logged"
        assert value not in read, "never returned"
    del key


async def test_a_revoked_token_whose_replacement_failed_to_reach_the_secret_is_replaced(world: World) -> None:
    """Revoked by the operator, its replacement's Secret write refused once: the next run still fixes the Secret."""
    await up(world)
    cluster = kube_of(world)
    cluster.kubelet.image_pull_failures.add("*/bcd:*")  # the third Node's bcd waits for its image
    document = world.document("doks")
    document["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = 3
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    _, plain = await world.compute.iam.create_api_key(world.tenant_id)
    auth = {"Authorization": f"Bearer {plain}"}
    url = f"{world.cloud.control_plane.url}/v1/join-tokens"

    async def live_tokens() -> list[Any]:
        async with httpx.AsyncClient(verify=False) as http:
            response = await http.get(url, params={"pool": "gpu-fleet"}, headers=auth)
        assert response.status_code == 200, response.text
        return [t for t in response.json() if t["revokedAt"] is None]

    async def a_token_is_live() -> bool:
        return len(await live_tokens()) == 1 and stored(cluster, "v1", "Secret", NAMESPACE, JOIN_SECRET) is not None

    await world.until(a_token_is_live, minutes=30, what="a token for the third Node", every=COARSE)
    (live,) = await live_tokens()
    cluster.fail_next("patch", "secrets", JOIN_SECRET)
    async with httpx.AsyncClient(verify=False) as http:
        response = await http.post(f"{url}/{live['id']}/revoke", headers=auth)
    assert response.status_code == 200, response.text
    await world.step(WATCH_SECONDS + 1)  # the run that makes the replacement, whose Secret write fails
    assert "writing the join Secret" in ((await view(world)).message or "")
    await world.step(WATCH_SECONDS + 1)  # the next run finds the Secret holding the revoked token
    cluster.kubelet.image_pull_failures.clear()
    await world.until(lambda: joined(world, 3), minutes=15, what="the third Node joined", every=COARSE)


async def test_a_substrate_put_back_while_its_teardown_runs_is_blocked_until_it_has_finished(world: World) -> None:
    """Prune the substrate, apply it again mid-teardown: refused with the teardown's state, nothing changed;
    once the teardown has finished the same apply makes a new, bookable substrate."""
    pool = await up(world)
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    bare = world.document("doks")
    del bare["pools"][0]["policy"]["substrate"]
    await world.compute.fleet.apply(bare, tenant_id=world.tenant_id, prune=True)
    await world.step(120)
    assert (await view(world)).state == "deleting"
    with pytest.raises(ComputeError) as refused:
        await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id, prune=True)
    assert refused.value.code is ErrorCode.INVALID_STATE
    (problem,) = refused.value.problems
    assert problem.path == "/pools/0" and "still being torn down (deleting: waiting for 1 booking" in problem.message
    assert "substrate" not in (await world.compute.pools.get(world.tenant_id, pool.id)).policy, "nothing applied"
    await world.compute.reservations.release(world.tenant_id, reservation.id)

    async def torn_down() -> bool:
        return (await view(world)).state == "deleted"

    await world.until(torn_down, minutes=60, what="the teardown finished", every=COARSE)
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id, prune=True)
    await world.until(lambda: joined(world, 2), minutes=60, what="a new substrate joined", every=COARSE)
    live = [n for n in await world.compute.nodes.list(world.tenant_id, pool_id=pool.id) if n.state != "retired"]
    assert len(live) == 2 and all(n.state == "ready" for n in live), "nothing left cordoned"
    again = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert again.state == "active"


async def test_a_node_that_joins_before_it_is_listed_is_spot_exactly_when_its_node_is(world: World) -> None:
    document = world.document("doks")
    document["providerAccounts"][0]["config"].update({"allowSpot": True, "previews": True})
    flavors = document["pools"][0]["policy"]["substrate"]["flavors"]
    flavors[0].update(nodes=1, autoscaling={"minNodes": 1, "maxNodes": 3})
    flavors.append(dict(flavors[0], name="spot", spot=True))
    pool = await up(world, document, nodes=2)
    cluster_id, short = (await view(world)).cluster.provider_cluster_id, pool.id[-6:]
    cluster = kube_of(world)
    seen: dict[str, set[bool]] = {}

    async def look() -> None:
        for node in await world.compute.nodes.list(world.tenant_id, pool_id=pool.id):
            seen.setdefault(node.kubernetes_node_name or node.name, set()).add(node.spot)

    async def quiet_for() -> float:
        """How far to step without losing a sight that matters: 1 s while a node bcd made is not listed yet
        (it may be seen between its join and its listing), else up to COARSE s, short of the next droplet's boot."""
        if not set(seen) <= set((await view(world)).nodes_listed):
            return 1.0
        now = world.cloud.clock.now()
        pools = world.cloud.doks.clusters[cluster_id].pools
        booting = [n.ready_at for p in pools for n in p.nodes if n.state == "provisioning"]
        room = min(((at - now).total_seconds() for at in booting), default=COARSE) - 1
        return max(1.0, min(COARSE, room))

    async def autoscaled(flavor: str, count: int) -> str:
        """DigitalOcean's autoscaler adds a Node to the flavor's node pool; its name once it is up."""
        before = set(cluster.kubelet.node_names)
        await world.cloud.doks.autoscale(cluster_id, f"bc-{short}-{flavor}", count)
        deadline = world.cloud.clock.now() + timedelta(seconds=1800)
        while world.cloud.clock.now() < deadline:
            added = set(cluster.kubelet.node_names) - before
            if added:
                (found,) = added
                return found
            await look()
            await world.step(await quiet_for())
        raise AssertionError("the autoscaler added no Node")

    # An on-demand Node L comes up and its kubelet stops reporting before bcd starts there (the join Secret
    # is gone since every Node joined, and its first write fails): L is listed, the join token keeps a use.
    cluster.fail_next("create", "secrets", JOIN_SECRET)
    stalled = await autoscaled("h100", 2)
    await cluster.kubelet.set_ready(stalled, False)

    async def token_kept_for_it() -> bool:
        await look()
        listed = stalled in (await view(world)).nodes_listed
        return listed and stored(cluster, "v1", "Secret", NAMESPACE, JOIN_SECRET) is not None

    await world.until(token_kept_for_it, minutes=10, every=1, what="the stalled Node listed, the token kept")

    # Another on-demand Node U comes up: its bcd joins at once with that use, before a run lists U.
    unlisted = await autoscaled("h100", 3)

    async def unlisted_joined() -> bool:
        await look()
        return unlisted in seen

    await world.until(unlisted_joined, minutes=10, every=1, what="the unlisted Node joined")
    # A Spot Node comes up too, and L's kubelet reports again.
    await autoscaled("spot", 2)
    await cluster.kubelet.set_ready(stalled, True)

    async def all_joined() -> bool:
        await look()
        return await joined(world, 5)

    await world.until(all_joined, minutes=60, every=1, what="every Node joined")
    spot_vms = {n for n in seen if f"-{short}-spot-" in n}
    assert len(seen) == 5 and len(spot_vms) == 2, seen
    for node_name, spot in seen.items():
        assert spot == {node_name in spot_vms}, f"{node_name} was seen with spot {spot}"


async def test_a_refused_credential_that_is_fixed_recovers_without_a_document_change(world: World) -> None:
    token = "dop_v1_" + "ef" * 32  # not an API token of the account yet: DigitalOcean answers 401
    document = world.document("doks")
    document["providerAccounts"][0]["config"]["token"] = await world.compute.secrets.create(world.tenant_id, token)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)

    async def refused() -> bool:
        clusters = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
        return bool(clusters) and clusters[0].status == "error" and world.cloud.doks.clusters == {}

    await world.until(refused, minutes=30, what="the provider refused the credential", every=COARSE)
    world.cloud.doks.add_token(token)
    await world.until(lambda: joined(world, 2), minutes=60, what="the pool recovered by itself", every=COARSE)
