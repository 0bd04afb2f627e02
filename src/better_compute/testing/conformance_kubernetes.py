"""The conformance cases every `ProviderImpl.kubernetes` must pass.

They hold what the clusters and substrate reconcilers rely on (the spec's "Check
your own provider"). A provider author describes their provider once, as a
`KubernetesSubject`, and runs the kit:

    report = await run_conformance(kubernetes_provider_conformance_cases(), make_subject)
    assert report.passed, report.render()

Every case works on clusters of its own (random names), waits for the provider by
calling `subject.advance(poll_seconds)` between reads (a simulated clock in tests,
real waiting against a real cloud), and deletes what it made at the end.
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from better_compute.core.clock import Clock, SystemClock
from better_compute.core.conformance import ConformanceCase, check, fail, note, require
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.kubernetes.provider import (
    Accelerators,
    ClusterCredentials,
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NodePoolSpec,
    NodePoolState,
    NodePoolStatus,
    ProviderKubernetes,
    adopted_node_pool_name,
)
from better_compute.testing.conformance_quota import quotas_answered
from better_compute.vps.provider import ProviderAccount, ProviderImpl, SecretResolver

__all__ = ["KubernetesSubject", "PoolShape", "kubernetes_provider_conformance_cases"]

T = TypeVar("T")

NO_GLOBAL_ID = (
    "outputs.globalId is empty: the driver should report the cluster's provider-global id; without it a second "
    "pool reaching the cluster through another account is refused only by the in-cluster claim"
)
SUBSTRATE_LABEL = "better-compute.dev/substrate-pool"
CAPACITY_LABEL = "better-compute.dev/capacity"


@dataclass(frozen=True)
class PoolShape:
    """A node pool's shape in the provider's vocabulary (`nodePool` / `gpuNodePool` of the spec)."""

    machine_type: str
    node_count: int = 1
    accelerators: Accelerators | None = None
    zones: tuple[str, ...] = ()
    disk_gib: int | None = None


@dataclass
class KubernetesSubject:
    """One provider as the kit sees it.

    - `provider`, `config` (the provider account's config, camelCase keys as in FleetConfig), `location`
      (where clusters are made), `node_pool` and `gpu_node_pool` (the latter with `accelerators`).
    - `accepts(credentials)`: whether the cluster endpoint accepts a minted credential (sync or async), asked
      of the emulated or real cluster itself.
    - `credential_lifetime_seconds`: how long the cluster really accepts a minted credential, by the
      provider's own rule (600 where the driver can mint one that short; EKS' presigned token: 900).
    - `zero_nodes`: False when a fixed-size node pool needs a node (then `node_count=0` must be INVALID_INPUT).
    - `spot`: False when the provider has no Spot node pools (then a Spot node pool must be refused).
    - `upgrade_from` / `upgrade_to`: the version clusters are created at, and the one the upgrade case moves to.
    - `adoptable`: the adopt id of a ready cluster with node pools of its own, made for this subject;
      `absent_adoptable`: an adopt id of the same form that names no cluster (NOT_FOUND is checked when given).
    - `clock`, `advance(seconds)`: how time moves while waiting (default: `clock.sleep`);
      `poll_seconds` between reads, at most `patience_seconds` per wait.
    """

    provider: ProviderImpl
    config: Mapping[str, Any]
    location: str
    node_pool: PoolShape
    gpu_node_pool: PoolShape
    accepts: Callable[[ClusterCredentials], bool | Awaitable[bool]]
    credential_lifetime_seconds: float = 600.0
    zero_nodes: bool = True
    spot: bool = True
    upgrade_from: str | None = None
    upgrade_to: str | None = None
    adoptable: str | None = None
    absent_adoptable: str | None = None
    clock: Clock = field(default_factory=SystemClock)
    advance: Callable[[float], Awaitable[None]] | None = None
    poll_seconds: float = 30.0
    patience_seconds: float = 3600.0
    resolve_secret: SecretResolver | None = None
    tenant_id: str = "tenant_conformance"
    pool_id: str = field(default_factory=lambda: new_id("pool"))

    @property
    def kubernetes(self) -> ProviderKubernetes:
        if self.provider.kubernetes is None:
            raise ComputeError(ErrorCode.INVALID_STATE, f"provider {self.provider.name} has no kubernetes capability")
        return self.provider.kubernetes

    def account(self, name: str = "conformance") -> ProviderAccount:
        if self.resolve_secret is None:
            return ProviderAccount(name=name, provider=self.provider.name, tenant_id=self.tenant_id, config=self.config)
        return ProviderAccount(
            name=name,
            provider=self.provider.name,
            tenant_id=self.tenant_id,
            config=self.config,
            resolve_secret=self.resolve_secret,
        )

    async def wait(self, seconds: float) -> None:
        if self.advance is not None:
            await self.advance(seconds)
        else:
            await self.clock.sleep(seconds)


def kubernetes_provider_conformance_cases() -> list[ConformanceCase[KubernetesSubject]]:
    """The cases, in the order the spec lists them."""
    return [
        ConformanceCase(
            "cluster-created-idempotently",
            "ensure_cluster twice makes one cluster, which find_cluster finds by its name, whose ready outputs "
            "are endpoint, version, location and nodeVersion, and should be a globalId that every account reads "
            "the same (without one, a note: adoption is then checked per account and by the in-cluster claim)",
            _cluster_created_idempotently,
        ),
        ConformanceCase(
            "clusters-listed-with-their-mark",
            "list_clusters lists a cluster made with better-compute's substrate-pool label, whose substrate_pool "
            "names that pool, and answers the mark of no cluster made without it (the orphan sweep's reading)",
            _clusters_listed_with_their_mark,
        ),
        ConformanceCase(
            "cluster-mode-never-changes",
            "ensure_cluster with another private_nodes mode is refused (INVALID_STATE) and changes nothing",
            _cluster_mode_never_changes,
        ),
        ConformanceCase(
            "cluster-upgrades-in-place",
            "upgrade_versions offers the new version, upgrade_cluster moves the same cluster to it, and "
            "upgrade_node_pool then moves a node pool's nodes to it",
            _cluster_upgrades,
        ),
        ConformanceCase(
            "node-pools-labelled-gpu-spot-resized-in-place",
            "a labelled GPU node pool and a Spot one are made, read back and resized in place",
            _node_pools,
        ),
        ConformanceCase(
            "node-pool-never-changes-shape",
            "ensure_node_pool with another machine type for an existing pool is refused (INVALID_STATE)",
            _node_pool_shape,
        ),
        ConformanceCase(
            "zero-nodes",
            "node_count 0 is refused as INVALID_INPUT when zero_nodes is false, else made",
            _zero_nodes,
        ),
        ConformanceCase(
            "credentials-accepted",
            "credentials() is a credential for the cluster endpoint that the endpoint accepts, used 600 s at "
            "most, and refused by the cluster once its real lifetime is over",
            _credentials,
        ),
        ConformanceCase("delete-twice", "delete_node_pool and delete_cluster succeed when called twice", _delete_twice),
        ConformanceCase(
            "quotas-answered",
            "quotas reads what the GPU node pool's machines count against: nothing for no machines, each quota with "
            "its metric, unit, limit and usage, adding in proportion to the machines",
            quotas_answered,
        ),
        ConformanceCase(
            "adopt-read-and-extend",
            "read_adoptable reads a cluster, which is extended with a bc-<last6>-<flavor> node pool "
            "and keeps its own node pools",
            _adopt,
        ),
    ]


# -- helpers -----------------------------------------------------------------------------------


def _cluster_spec(s: KubernetesSubject, *, private_nodes: bool = False) -> ClusterSpec:
    return ClusterSpec(
        name=f"bc-conf-{secrets.token_hex(4)}",
        location=s.location,
        version=s.upgrade_from,
        private_nodes=private_nodes,
        labels={"better-compute-pool": s.pool_id[-12:]},
    )


def _pool_spec(
    s: KubernetesSubject, name: str, shape: PoolShape, *, spot: bool = False, node_count: int | None = None
) -> NodePoolSpec:
    labels = {SUBSTRATE_LABEL: s.pool_id}
    if spot:
        labels[CAPACITY_LABEL] = "spot"
    return NodePoolSpec(
        name=name,
        machine_type=shape.machine_type,
        node_count=shape.node_count if node_count is None else node_count,
        labels=labels,
        accelerators=shape.accelerators,
        spot=spot,
        zones=shape.zones,
        disk_gib=shape.disk_gib,
    )


@asynccontextmanager
async def _clusters(s: KubernetesSubject) -> AsyncIterator[list[str]]:
    """Cluster ids a case made; deleted when the case ends, whatever happened."""
    made: list[str] = []
    try:
        yield made
    finally:
        for cluster_id in made:
            with suppress(ComputeError):
                await s.kubernetes.delete_cluster(s.account(), cluster_id)


async def _ready_cluster(s: KubernetesSubject, made: list[str], spec: ClusterSpec | None = None) -> ClusterState:
    spec = spec or _cluster_spec(s)
    state = await _retrying(s, lambda: s.kubernetes.ensure_cluster(s.account(), spec))
    made.append(state.cluster_id)
    return await _wait_cluster(s, state.cluster_id, lambda c: c.status == ClusterStatus.READY, "ready")


async def _wait_cluster(
    s: KubernetesSubject, cluster_id: str, done: Callable[[ClusterState], bool], what: str
) -> ClusterState:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_cluster(s.account(), cluster_id)
        state = require(state, f"cluster {cluster_id} disappeared while waiting for it to be {what}")
        check(state.status != ClusterStatus.ERROR, f"cluster {cluster_id} went to error: {state.message}")
        if done(state):
            return state
        check(
            waited < s.patience_seconds,
            f"cluster {cluster_id} not {what} after {waited:.0f} s (status {state.status}: {state.message})",
        )
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def _wait_cluster_gone(s: KubernetesSubject, cluster_id: str) -> None:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_cluster(s.account(), cluster_id)
        if state is None or state.status == ClusterStatus.DELETED:
            return
        check(waited < s.patience_seconds, f"cluster {cluster_id} still {state.status} after {waited:.0f} s")
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def _wait_pool(
    s: KubernetesSubject, cluster_id: str, name: str, done: Callable[[NodePoolState], bool], what: str
) -> NodePoolState:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_node_pool(s.account(), cluster_id, name)
        state = require(state, f"node pool {name} of cluster {cluster_id} is missing while waiting for {what}")
        check(state.status != NodePoolStatus.ERROR, f"node pool {name} went to error: {state.message}")
        if done(state):
            return state
        check(
            waited < s.patience_seconds,
            f"node pool {name} not {what} after {waited:.0f} s (status {state.status}, {state.node_count} nodes)",
        )
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


async def _wait_pool_gone(s: KubernetesSubject, cluster_id: str, name: str) -> None:
    waited = 0.0
    while True:
        state = await s.kubernetes.get_node_pool(s.account(), cluster_id, name)
        if state is None or state.status == NodePoolStatus.DELETED:
            return
        check(waited < s.patience_seconds, f"node pool {name} still {state.status} after {waited:.0f} s")
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


def _ready_with(count: int) -> Callable[[NodePoolState], bool]:
    return lambda p: p.status == NodePoolStatus.READY and p.node_count == count


async def _retrying(s: KubernetesSubject, call: Callable[[], Awaitable[T]]) -> T:
    """A change the provider answers UNAVAILABLE (busy, throttled) is tried again after its retry_after,
    as the reconcile engine would, for at most `patience_seconds`."""
    waited = 0.0
    while True:
        try:
            return await call()
        except ComputeError as exc:
            if exc.code != ErrorCode.UNAVAILABLE or waited >= s.patience_seconds:
                raise
            delay = exc.retry_after or s.poll_seconds
            await s.wait(delay)
            waited += delay


async def _refused(call: Awaitable[Any], code: ErrorCode | None, what: str) -> ComputeError:
    """Await `call`, which must raise ComputeError (of `code` when given)."""
    try:
        await call
    except ComputeError as exc:
        check(code is None or exc.code == code, f"{what} was refused with {exc.code}, not {code}: {exc.message}")
        return exc
    fail(f"{what} was accepted; it must be refused" + (f" with {code}" if code else ""))


def _version_matches(actual: str, wanted: str) -> bool:
    """A provider may answer a fuller version than asked (1.31 -> 1.31.2-gke.1)."""
    return actual == wanted or actual.startswith((wanted + ".", wanted + "-"))


# -- cases -------------------------------------------------------------------------------------


async def _cluster_created_idempotently(s: KubernetesSubject) -> None:
    k = s.kubernetes
    spec = _cluster_spec(s)
    async with _clusters(s) as made:
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
        ready = await _wait_cluster(s, first.cluster_id, lambda c: c.status == ClusterStatus.READY, "ready")
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


async def _clusters_listed_with_their_mark(s: KubernetesSubject) -> None:
    k = s.kubernetes
    marked = replace(_cluster_spec(s), labels={SUBSTRATE_LABEL: s.pool_id})
    plain = _cluster_spec(s)
    async with _clusters(s) as made:
        for spec in (marked, plain):
            made.append((await _retrying(s, partial(k.ensure_cluster, s.account(), spec))).cluster_id)
        listed = {c.cluster_id: c for c in await k.list_clusters(s.account())}
        for cluster_id, spec, mark in ((made[0], marked, s.pool_id), (made[1], plain, None)):
            found = listed.get(cluster_id)
            check(found is not None, f"list_clusters does not list cluster {cluster_id}, made as {spec.name!r}")
            check(
                found is not None and found.substrate_pool == mark,
                f"list_clusters answers cluster {cluster_id} marked {found and found.substrate_pool!r}, not {mark!r}",
            )


async def _cluster_mode_never_changes(s: KubernetesSubject) -> None:
    k = s.kubernetes
    spec = _cluster_spec(s, private_nodes=False)
    async with _clusters(s) as made:
        ready = await _ready_cluster(s, made, spec)
        flipped = ClusterSpec(spec.name, spec.location, spec.version, True, spec.labels)
        await _refused(
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


async def _cluster_upgrades(s: KubernetesSubject) -> None:
    target = require(s.upgrade_to, "the subject names no upgrade_to version")
    k = s.kubernetes
    async with _clusters(s) as made:
        ready = await _ready_cluster(s, made)
        made_at = require(ready.outputs, "a ready cluster has no outputs")
        check(
            not _version_matches(made_at.version, target),
            f"the cluster was made at {made_at.version}, already the upgrade target {target}",
        )
        cid = ready.cluster_id
        offered = await _retrying(s, lambda: k.upgrade_versions(s.account(), cid))
        check(
            any(_version_matches(v, target) for v in offered),
            f"upgrade_versions offers {list(offered)}, not the upgrade target {target}",
        )
        pool = _pool_spec(s, "upgrade", s.node_pool)
        await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, pool))
        await _wait_pool(s, cid, pool.name, _ready_with(pool.node_count), "ready before the upgrade")
        state = await _retrying(s, lambda: k.upgrade_cluster(s.account(), ready.cluster_id, target))
        check(state.cluster_id == ready.cluster_id, f"upgrade_cluster answered another cluster {state.cluster_id!r}")
        upgraded = await _wait_cluster(
            s,
            ready.cluster_id,
            lambda c: (
                c.status == ClusterStatus.READY
                and c.outputs is not None
                and _version_matches(c.outputs.version, target)
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
        state = await _retrying(s, lambda: s.kubernetes.upgrade_node_pool(s.account(), cluster_id, name, version))
        check(state.name == name, f"upgrade_node_pool answered node pool {state.name!r}")
        check(state.status != NodePoolStatus.ERROR, f"node pool {name} went to error: {state.message}")
        if state.status == NodePoolStatus.READY and state.version and _version_matches(state.version, version):
            return
        check(
            waited < s.patience_seconds,
            f"node pool {name} not ready at {version} after {waited:.0f} s (status {state.status}, "
            f"version {state.version})",
        )
        await s.wait(s.poll_seconds)
        waited += s.poll_seconds


def _check_pool(state: NodePoolState, spec: NodePoolSpec) -> None:
    check(state.name == spec.name, f"node pool {spec.name} reads back as {state.name!r}")
    check(
        state.machine_type == spec.machine_type,
        f"node pool {spec.name} has machine type {state.machine_type!r}, not {spec.machine_type!r}",
    )
    missing = {k: v for k, v in spec.labels.items() if state.labels.get(k) != v}
    check(not missing, f"node pool {spec.name} lacks the labels {missing}")
    check(state.spot == spec.spot, f"node pool {spec.name} reads spot={state.spot}, asked {spec.spot}")
    check(
        state.accelerators == spec.accelerators,
        f"node pool {spec.name} reads accelerators {state.accelerators}, asked {spec.accelerators}",
    )


async def _node_pools(s: KubernetesSubject) -> None:
    k = s.kubernetes
    check(s.gpu_node_pool.accelerators is not None, "the subject's gpu_node_pool has no accelerators")
    async with _clusters(s) as made:
        cluster = await _ready_cluster(s, made)
        cid = cluster.cluster_id
        gpu = _pool_spec(s, "gpu", s.gpu_node_pool)
        specs = [gpu]
        await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, gpu))
        retried = await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, gpu))
        check(retried.name == gpu.name, f"a retried ensure_node_pool answered node pool {retried.name!r}")
        spot = _pool_spec(s, "spot", s.node_pool, spot=True)
        if s.spot:
            await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, spot))
            specs.append(spot)
        else:
            await _refused(k.ensure_node_pool(s.account(), cid, spot), None, "a Spot node pool (spot is false)")
        for spec in specs:
            state = await _wait_pool(s, cid, spec.name, _ready_with(spec.node_count), f"ready with {spec.node_count}")
            _check_pool(state, spec)
        listed = require(await k.get_cluster(s.account(), cid), "the cluster is gone")
        missing_pools = {spec.name for spec in specs} - set(listed.node_pools)
        check(not missing_pools, f"the cluster does not list its node pools {sorted(missing_pools)}")
        for spec in specs:
            bigger = spec.node_count + 1
            resized = await _retrying(s, partial(k.resize_node_pool, s.account(), cid, spec.name, bigger))
            check(resized.name == spec.name, f"resize_node_pool answered node pool {resized.name!r}")
            state = await _wait_pool(s, cid, spec.name, _ready_with(bigger), f"resized to {bigger}")
            _check_pool(state, spec)
            settled = await _retrying(
                s, partial(k.ensure_node_pool, s.account(), cid, replace(spec, node_count=bigger))
            )
            check(settled.name == spec.name, "ensure_node_pool after a resize answered another node pool")


async def _node_pool_shape(s: KubernetesSubject) -> None:
    k = s.kubernetes
    check(
        s.node_pool.machine_type != s.gpu_node_pool.machine_type,
        "node_pool and gpu_node_pool have the same machine type; the case needs two",
    )
    async with _clusters(s) as made:
        cluster = await _ready_cluster(s, made)
        cid = cluster.cluster_id
        spec = _pool_spec(s, "shape", s.node_pool)
        await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, spec))
        before = await _wait_pool(s, cid, spec.name, _ready_with(spec.node_count), "ready")
        reshaped = replace(spec, machine_type=s.gpu_node_pool.machine_type, accelerators=s.gpu_node_pool.accelerators)
        await _refused(
            k.ensure_node_pool(s.account(), cid, reshaped),
            ErrorCode.INVALID_STATE,
            f"ensure_node_pool changing machine type {spec.machine_type} -> {reshaped.machine_type}",
        )
        after = require(
            await k.get_node_pool(s.account(), cid, spec.name), "the node pool is gone after a refused change of shape"
        )
        check(
            after.machine_type == before.machine_type,
            f"the node pool changed shape in place: machine type {before.machine_type} -> {after.machine_type}",
        )


async def _zero_nodes(s: KubernetesSubject) -> None:
    k = s.kubernetes
    async with _clusters(s) as made:
        cluster = await _ready_cluster(s, made)
        cid = cluster.cluster_id
        empty = _pool_spec(s, "empty", s.node_pool, node_count=0)
        if not s.zero_nodes:
            await _refused(
                k.ensure_node_pool(s.account(), cid, empty), ErrorCode.INVALID_INPUT, "a fixed-size pool of 0 nodes"
            )
            check(
                await k.get_node_pool(s.account(), cid, empty.name) is None,
                "a refused node pool of 0 nodes exists at the provider",
            )
            return
        await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, empty))
        await _wait_pool(s, cid, empty.name, _ready_with(0), "ready with 0 nodes")


async def _credentials(s: KubernetesSubject) -> None:
    k = s.kubernetes
    async with _clusters(s) as made:
        cluster = await _ready_cluster(s, made)
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


async def _delete_twice(s: KubernetesSubject) -> None:
    k = s.kubernetes
    async with _clusters(s) as made:
        cluster = await _ready_cluster(s, made)
        cid = cluster.cluster_id
        spec = _pool_spec(s, "doomed", s.node_pool)
        await _retrying(s, lambda: k.ensure_node_pool(s.account(), cid, spec))
        await _wait_pool(s, cid, spec.name, _ready_with(spec.node_count), "ready")
        await _retrying(s, lambda: k.delete_node_pool(s.account(), cid, spec.name))
        await _retrying(s, lambda: k.delete_node_pool(s.account(), cid, spec.name))
        await _wait_pool_gone(s, cid, spec.name)
        await _retrying(s, lambda: k.delete_node_pool(s.account(), cid, spec.name))
        await _retrying(s, lambda: k.delete_cluster(s.account(), cid))
        await _retrying(s, lambda: k.delete_cluster(s.account(), cid))
        await _wait_cluster_gone(s, cid)
        await _retrying(s, lambda: k.delete_cluster(s.account(), cid))


async def _adopt(s: KubernetesSubject) -> None:
    adoptable = require(s.adoptable, "the subject names no adoptable cluster")
    k = s.kubernetes
    if s.absent_adoptable is not None:
        await _refused(k.read_adoptable(s.account(), s.absent_adoptable), ErrorCode.NOT_FOUND, "adopting a missing id")
    state = await k.read_adoptable(s.account(), adoptable)
    check(state.status == ClusterStatus.READY, f"the adoptable cluster reads {state.status}, not ready")
    check(state.outputs is not None, "the adoptable cluster has no outputs")
    if state.outputs is not None and not state.outputs.global_id:
        note(NO_GLOBAL_ID)
    own = set(state.node_pools)
    name = adopted_node_pool_name(s.pool_id, "gpu")
    check(name not in own, f"the adopted node pool name {name} is one of the cluster's own")
    spec = _pool_spec(s, name, s.gpu_node_pool)
    await _retrying(s, lambda: k.ensure_node_pool(s.account(), state.cluster_id, spec))
    added = await _wait_pool(s, state.cluster_id, name, _ready_with(spec.node_count), "ready")
    _check_pool(added, spec)
    extended = require(await k.get_cluster(s.account(), state.cluster_id), "the adopted cluster is gone")
    check(
        set(extended.node_pools) == own | {name},
        f"the adopted cluster lists {sorted(extended.node_pools)}, expected {sorted(own | {name})}",
    )
    await _retrying(s, lambda: k.delete_node_pool(s.account(), state.cluster_id, name))
    await _wait_pool_gone(s, state.cluster_id, name)
    kept = require(await k.get_cluster(s.account(), state.cluster_id), "the adopted cluster is gone")
    check(kept.status == ClusterStatus.READY, f"the adopted cluster did not stay ready: {kept.status}")
    check(
        set(kept.node_pools) == own,
        f"the adopted cluster's own node pools changed: {sorted(own)} -> {sorted(kept.node_pools)}",
    )
