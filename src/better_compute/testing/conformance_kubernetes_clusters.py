"""The Kubernetes conformance cases about clusters: made idempotently, listed with their mark, never changing mode,
upgraded in place, their credentials, deleted twice, and adopted."""

from __future__ import annotations

import inspect
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from better_compute.core.conformance import check, note, require
from better_compute.core.errors import ErrorCode
from better_compute.kubernetes.provider import (
    ClusterCredentials,
    ClusterSpec,
    ClusterStatus,
    NodePoolStatus,
    adopted_node_pool_name,
)
from better_compute.testing.conformance_kubernetes_pools import check_pool
from better_compute.testing.conformance_kubernetes_steps import (
    SUBSTRATE_LABEL,
    case_clusters,
    cluster_spec,
    pool_spec,
    ready_cluster,
    ready_with,
    refused,
    retrying,
    version_matches,
    wait_cluster,
    wait_cluster_gone,
    wait_pool,
    wait_pool_gone,
)

if TYPE_CHECKING:
    from better_compute.testing.conformance_kubernetes import KubernetesSubject

__all__ = [
    "NO_GLOBAL_ID",
    "adopt_read_and_extend",
    "cluster_created_idempotently",
    "cluster_mode_never_changes",
    "cluster_upgrades",
    "clusters_listed_with_their_mark",
    "credentials_accepted",
    "delete_twice",
]

NO_GLOBAL_ID = (
    "outputs.globalId is empty: the driver should report the cluster's provider-global id; without it a second "
    "pool reaching the cluster through another account is refused only by the in-cluster claim"
)


async def cluster_created_idempotently(s: KubernetesSubject) -> None:
    k = s.kubernetes
    spec = cluster_spec(s)
    async with case_clusters(s) as made:
        first = await k.ensure_cluster(s.account(), spec)
        made.append(first.cluster_id)
        check(first.name == spec.name, f"ensure_cluster named the cluster {first.name!r}, not {spec.name!r}")
        retry = await k.ensure_cluster(s.account(), spec)
        if retry.cluster_id != first.cluster_id:
            made.append(retry.cluster_id)
        check(
            retry.cluster_id == first.cluster_id,
            f"a retried ensure_cluster answered cluster {retry.cluster_id!r}, the first call {first.cluster_id!r}: "
            "a retry must find the cluster the first call made, never make a second one",
        )
        found = await k.find_cluster(s.account(), spec.name, spec.location)
        check(
            found is not None and found.cluster_id == first.cluster_id,
            f"find_cluster({spec.name!r}, {spec.location!r}) answered {found and found.cluster_id!r}, not "
            f"{first.cluster_id!r}: a teardown that lost the id must find the cluster by its name",
        )
        absent = await k.find_cluster(s.account(), f"{spec.name}-absent", spec.location)
        check(absent is None, f"find_cluster of a name nobody made answered {absent and absent.cluster_id!r}")
        ready = await wait_cluster(s, first.cluster_id, lambda c: c.status == ClusterStatus.READY, "ready")
        out = require(ready.outputs, "a ready cluster has no outputs")
        for key, value in (("endpoint", out.endpoint), ("version", out.version), ("nodeVersion", out.node_version)):
            check(bool(value), f"the ready output {key} is empty")
        if not out.global_id:
            note(NO_GLOBAL_ID)
        check(out.location == s.location, f"the ready output location is {out.location!r}, not {s.location!r}")
        again = await k.ensure_cluster(s.account(), spec)
        check(
            again.cluster_id == first.cluster_id,
            f"ensure_cluster on a ready cluster answered {again.cluster_id!r}, not {first.cluster_id!r}",
        )
        check(again.status == ClusterStatus.READY, f"ensure_cluster on a ready cluster answered {again.status}")
        check(
            again.outputs is not None and again.outputs.global_id == out.global_id,
            "ensure_cluster on a ready cluster answered another globalId",
        )
        other = await k.get_cluster(s.account("conformance-other-account"), first.cluster_id)
        check(
            other is not None and other.outputs is not None and other.outputs.global_id == out.global_id,
            "another account reads another globalId for the same cluster",
        )


async def clusters_listed_with_their_mark(s: KubernetesSubject) -> None:
    k = s.kubernetes
    marked = replace(cluster_spec(s), labels={SUBSTRATE_LABEL: s.pool_id})
    plain = cluster_spec(s)
    async with case_clusters(s) as made:
        for spec in (marked, plain):
            made.append((await retrying(s, partial(k.ensure_cluster, s.account(), spec))).cluster_id)
        listed = {c.cluster_id: c for c in await k.list_clusters(s.account())}
        for cluster_id, spec, mark in ((made[0], marked, s.pool_id), (made[1], plain, None)):
            found = listed.get(cluster_id)
            check(found is not None, f"list_clusters does not list cluster {cluster_id}, made as {spec.name!r}")
            check(
                found is not None and found.substrate_pool == mark,
                f"list_clusters answers cluster {cluster_id} marked {found and found.substrate_pool!r}, not {mark!r}",
            )


async def cluster_mode_never_changes(s: KubernetesSubject) -> None:
    k = s.kubernetes
    spec = cluster_spec(s, private_nodes=False)
    async with case_clusters(s) as made:
        ready = await ready_cluster(s, made, spec)
        flipped = ClusterSpec(spec.name, spec.location, spec.version, True, spec.labels)
        await refused(
            k.ensure_cluster(s.account(), flipped), ErrorCode.INVALID_STATE, "ensure_cluster with private_nodes changed"
        )
        after = require(
            await k.get_cluster(s.account(), ready.cluster_id), "the cluster is gone after a refused change of mode"
        )
        check(not after.private_nodes, "the cluster's mode changed in place to private nodes")
        check(
            after.outputs is not None
            and ready.outputs is not None
            and after.outputs.global_id == ready.outputs.global_id,
            "the cluster's globalId changed after a refused change of mode: it was replaced",
        )


async def cluster_upgrades(s: KubernetesSubject) -> None:
    target = require(s.upgrade_to, "the subject names no upgrade_to version")
    k = s.kubernetes
    async with case_clusters(s) as made:
        ready = await ready_cluster(s, made)
        made_at = require(ready.outputs, "a ready cluster has no outputs")
        check(
            not version_matches(made_at.version, target),
            f"the cluster was made at {made_at.version}, already the upgrade target {target}",
        )
        cid = ready.cluster_id
        offered = await retrying(s, lambda: k.upgrade_versions(s.account(), cid))
        check(
            any(version_matches(v, target) for v in offered),
            f"upgrade_versions offers {list(offered)}, not the upgrade target {target}",
        )
        pool = pool_spec(s, "upgrade", s.node_pool)
        await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, pool))
        await wait_pool(s, cid, pool.name, ready_with(pool.node_count), "ready before the upgrade")
        state = await retrying(s, lambda: k.upgrade_cluster(s.account(), ready.cluster_id, target))
        check(state.cluster_id == ready.cluster_id, f"upgrade_cluster answered another cluster {state.cluster_id!r}")
        upgraded = await wait_cluster(
            s,
            ready.cluster_id,
            lambda c: (
                c.status == ClusterStatus.READY and c.outputs is not None and version_matches(c.outputs.version, target)
            ),
            f"ready at version {target}",
        )
        now = require(upgraded.outputs, "an upgraded cluster has no outputs")
        check(
            now.global_id == made_at.global_id,
            "the upgraded cluster has another globalId: it was replaced, not upgraded in place",
        )
        check(
            now.endpoint == made_at.endpoint,
            "the upgraded cluster has another endpoint: it was replaced, not upgraded in place",
        )
        await _wait_pool_upgraded(s, cid, pool.name, target)


async def _wait_pool_upgraded(s: KubernetesSubject, cluster_id: str, name: str, version: str) -> None:
    """Ask upgrade_node_pool (again: it answers the pool as it is) until the pool is ready at `version`."""
    waited = 0.0
    while True:
        state = await retrying(s, lambda: s.kubernetes.upgrade_node_pool(s.account(), cluster_id, name, version))
        check(state.name == name, f"upgrade_node_pool answered node pool {state.name!r}")
        check(state.status != NodePoolStatus.ERROR, f"node pool {name} went to error: {state.message}")
        if state.status == NodePoolStatus.READY and state.version and version_matches(state.version, version):
            return
        check(
            waited < s.patience_seconds,
            f"node pool {name} not ready at {version} after {waited:.0f} s (status {state.status}, "
            f"version {state.version})",
        )
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def credentials_accepted(s: KubernetesSubject) -> None:
    k = s.kubernetes
    async with case_clusters(s) as made:
        cluster = await ready_cluster(s, made)
        outputs = require(cluster.outputs, "a ready cluster has no outputs")
        creds = await k.credentials(s.account(), cluster.cluster_id)
        check(
            creds.endpoint == outputs.endpoint,
            f"the credential is for {creds.endpoint!r}, the cluster endpoint is {outputs.endpoint!r}",
        )
        check(bool(creds.token), "the credential has no token")
        check(creds.token not in repr(creds), "the credential's repr shows its token")
        minted = s.clock.now()
        left = (creds.expires_at - minted).total_seconds()
        check(540 <= left <= 600, f"the credential is used for {left:.0f} s; it must be 600 s at most, and near it")
        check(bool(await _accepted(s, creds)), "the cluster endpoint does not accept the minted credential")
        # The cluster's own word, not the driver's expires_at: after the provider's lifetime it refuses.
        await s.wait(s.credential_lifetime_seconds + 1 - (s.clock.now() - minted).total_seconds())
        check(
            not await _accepted(s, creds),
            f"the cluster still accepts the credential {s.credential_lifetime_seconds:.0f} s after it was minted",
        )


async def _accepted(s: KubernetesSubject, creds: ClusterCredentials) -> bool:
    accepted = s.accepts(creds)
    if inspect.isawaitable(accepted):
        accepted = await accepted
    return bool(accepted)


async def delete_twice(s: KubernetesSubject) -> None:
    k = s.kubernetes
    async with case_clusters(s) as made:
        cluster = await ready_cluster(s, made)
        cid = cluster.cluster_id
        spec = pool_spec(s, "doomed", s.node_pool)
        await retrying(s, lambda: k.ensure_node_pool(s.account(), cid, spec))
        await wait_pool(s, cid, spec.name, ready_with(spec.node_count), "ready")
        await retrying(s, lambda: k.delete_node_pool(s.account(), cid, spec.name))
        await retrying(s, lambda: k.delete_node_pool(s.account(), cid, spec.name))
        await wait_pool_gone(s, cid, spec.name)
        await retrying(s, lambda: k.delete_node_pool(s.account(), cid, spec.name))
        await retrying(s, lambda: k.delete_cluster(s.account(), cid))
        await retrying(s, lambda: k.delete_cluster(s.account(), cid))
        await wait_cluster_gone(s, cid)
        await retrying(s, lambda: k.delete_cluster(s.account(), cid))


async def adopt_read_and_extend(s: KubernetesSubject) -> None:
    adoptable = require(s.adoptable, "the subject names no adoptable cluster")
    k = s.kubernetes
    if s.absent_adoptable is not None:
        await refused(k.read_adoptable(s.account(), s.absent_adoptable), ErrorCode.NOT_FOUND, "adopting a missing id")
    state = await k.read_adoptable(s.account(), adoptable)
    check(state.status == ClusterStatus.READY, f"the adoptable cluster reads {state.status}, not ready")
    check(state.outputs is not None, "the adoptable cluster has no outputs")
    if state.outputs is not None and not state.outputs.global_id:
        note(NO_GLOBAL_ID)
    own = set(state.node_pools)
    name = adopted_node_pool_name(s.pool_id, "gpu")
    check(name not in own, f"the adopted node pool name {name} is one of the cluster's own")
    spec = pool_spec(s, name, s.gpu_node_pool)
    await retrying(s, lambda: k.ensure_node_pool(s.account(), state.cluster_id, spec))
    added = await wait_pool(s, state.cluster_id, name, ready_with(spec.node_count), "ready")
    check_pool(added, spec)
    extended = require(await k.get_cluster(s.account(), state.cluster_id), "the adopted cluster is gone")
    check(
        set(extended.node_pools) == own | {name},
        f"the adopted cluster lists {sorted(extended.node_pools)}, expected {sorted(own | {name})}",
    )
    await retrying(s, lambda: k.delete_node_pool(s.account(), state.cluster_id, name))
    await wait_pool_gone(s, state.cluster_id, name)
    kept = require(await k.get_cluster(s.account(), state.cluster_id), "the adopted cluster is gone")
    check(kept.status == ClusterStatus.READY, f"the adopted cluster did not stay ready: {kept.status}")
    check(
        set(kept.node_pools) == own,
        f"the adopted cluster's own node pools changed: {sorted(own)} -> {sorted(kept.node_pools)}",
    )
