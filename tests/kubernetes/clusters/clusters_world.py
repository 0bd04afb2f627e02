"""What the clusters package's unit tests share: an in-memory `ProviderKubernetes`, and the
clusters reconciler run by a real engine on a real store and a SimClock (no network, no emulator).

The fake driver answers as the protocol says (idempotent creates, deletes of what is gone
succeed) and moves only when the test moves it (`ready`, `pool_ready`, `gone`), so every
provider state a run can meet is set up in one line. `refuse[method]` makes that call raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from better_compute.compute.changes import ChangeFeed
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.engine import Engine
from better_compute.engine.models import WorkItem
from better_compute.kubernetes.cluster_access.join_reviewer import JoinReviewers
from better_compute.kubernetes.clusters.reconciler import ClustersReconciler
from better_compute.kubernetes.clusters.records import record_desired
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.desired import desired_substrate
from better_compute.kubernetes.names import CLUSTER_KIND
from better_compute.kubernetes.provider import (
    Autoscaling,
    ClusterCredentials,
    ClusterOutputs,
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    GpuInfo,
    KubernetesVocabulary,
    NodePoolSpec,
    NodePoolState,
    NodePoolStatus,
    Quota,
    QuotaNeed,
    TypicalDurations,
)
from better_compute.kubernetes.tables import ClusterRow, NodePoolRow
from better_compute.store import Database
from better_compute.vps.provider import ProviderAccount

TENANT = "t-1"
ACCOUNT = "managed-k8s"
SECOND_ACCOUNT = "second-k8s"
"""Another account of the same provider, that reaches the same clusters."""
PROVIDER = "fake"
DURATIONS = TypicalDurations(cluster_create=300.0, node_pool_create=180.0, node_pool_resize=60.0)


def substrate(nodes: int = 2, *, adopt: str | None = None, flavors: tuple[str, ...] = ("h100",)) -> dict[str, Any]:
    """A pool's `policy.substrate`: created in tor1 (or adopted), one node pool per flavor."""
    cluster = {"adopt": adopt} if adopt else {"create": {"location": "tor1"}}
    return {
        "kind": "kubernetes",
        "account": ACCOUNT,
        "cluster": cluster,
        "flavors": [{"name": name, "machineType": "gpu-h100x8-640gb", "nodes": nodes} for name in flavors],
    }


def refused(message: str, reason: str | None = None, code: ErrorCode = ErrorCode.INVALID_STATE) -> ComputeError:
    return ComputeError(code, message, reason=reason)


@dataclass
class FakeDriver:
    """`ProviderKubernetes` in memory; `calls` lists each method called, in order."""

    vocabulary: KubernetesVocabulary = field(
        default_factory=lambda: KubernetesVocabulary(
            provider=PROVIDER,
            cluster_location="region",
            nodes_per_zone=False,
            zero_nodes=True,
            spot=False,
            zones_and_disk=False,
            node_naming="<pool>-<n>",
            durations=DURATIONS,
        )
    )
    clusters: dict[str, ClusterState] = field(default_factory=dict)
    pools: dict[tuple[str, str], NodePoolState] = field(default_factory=dict)
    refuse: dict[str, ComputeError] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def _call(self, method: str) -> None:
        self.calls.append(method)
        if method in self.refuse:
            raise self.refuse[method]

    # what the test moves

    def seed(self, cluster_id: str, name: str) -> None:
        """A ready cluster someone else made (one to adopt)."""
        self.clusters[cluster_id] = ClusterState(cluster_id, name, ClusterStatus.PROVISIONING)
        self.ready(cluster_id)

    def ready(self, cluster_id: str) -> None:
        state = self.clusters[cluster_id]
        outputs = ClusterOutputs(
            endpoint=f"https://{state.name}.example",
            version="1.31.2",
            location="tor1",
            node_version="1.31.2",
            global_id=f"gid/{cluster_id}",
        )
        self.clusters[cluster_id] = replace(state, status=ClusterStatus.READY, outputs=outputs)

    def pool_ready(self, cluster_id: str, name: str) -> None:
        self.pools[cluster_id, name] = replace(self.pools[cluster_id, name], status=NodePoolStatus.READY)

    def gone(self, cluster_id: str, name: str | None = None) -> None:
        """The provider finished a delete: of the node pool `name`, or of the cluster."""
        if name is not None:
            del self.pools[cluster_id, name]
        else:
            del self.clusters[cluster_id]

    # the protocol

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        self._call("ensure_cluster")
        cluster_id = f"{spec.location}/{spec.name}"
        if cluster_id not in self.clusters:
            self.clusters[cluster_id] = ClusterState(cluster_id, spec.name, ClusterStatus.PROVISIONING)
        return self.clusters[cluster_id]

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        self._call("get_cluster")
        return self.clusters.get(cluster_id)

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        self._call("find_cluster")
        return self.clusters.get(f"{location}/{name}")

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        self._call("list_clusters")
        return tuple(self.clusters.values())

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        self._call("delete_cluster")
        if cluster_id in self.clusters:
            self.clusters[cluster_id] = replace(self.clusters[cluster_id], status=ClusterStatus.DELETING)

    async def upgrade_cluster(self, account: ProviderAccount, cluster_id: str, version: str) -> ClusterState:
        self._call("upgrade_cluster")
        return self.clusters[cluster_id]

    async def upgrade_versions(self, account: ProviderAccount, cluster_id: str) -> tuple[str, ...]:
        self._call("upgrade_versions")
        return ("1.32.1", "1.33.0")

    async def upgrade_node_pool(
        self, account: ProviderAccount, cluster_id: str, name: str, version: str
    ) -> NodePoolState:
        self._call("upgrade_node_pool")
        return self.pools[cluster_id, name]

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        self._call("ensure_node_pool")
        current = self.pools.get((cluster_id, spec.name))
        if current is None or current.status is NodePoolStatus.ERROR:
            current = self.pools[cluster_id, spec.name] = NodePoolState(
                name=spec.name,
                status=NodePoolStatus.PROVISIONING,
                machine_type=spec.machine_type,
                node_count=spec.node_count,
                spot=spec.spot,
                autoscaling=spec.autoscaling,
            )
        return current

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState | None:
        self._call("get_node_pool")
        return self.pools.get((cluster_id, name))

    async def resize_node_pool(
        self,
        account: ProviderAccount,
        cluster_id: str,
        name: str,
        node_count: int,
        autoscaling: Autoscaling | None = None,
    ) -> NodePoolState:
        self._call("resize_node_pool")
        count = self.pools[cluster_id, name].node_count if autoscaling else node_count
        resized = replace(
            self.pools[cluster_id, name], status=NodePoolStatus.UPDATING, node_count=count, autoscaling=autoscaling
        )
        self.pools[cluster_id, name] = resized
        return resized

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        self._call("delete_node_pool")
        if (cluster_id, name) in self.pools:
            self.pools[cluster_id, name] = replace(self.pools[cluster_id, name], status=NodePoolStatus.DELETING)

    async def remove_machines(
        self,
        account: ProviderAccount,
        cluster_id: str,
        pool_name: str,
        provider_ids: tuple[str, ...],
        *,
        replace: bool,
    ) -> None:
        self._call("remove_machines")

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        self._call("credentials")
        state = self.clusters[cluster_id]
        endpoint = state.outputs.endpoint if state.outputs else ""
        return ClusterCredentials(endpoint, "Q0E=", "admin-token-0001", datetime(2030, 1, 1))

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        self._call("read_adoptable")
        state = self.clusters.get(adopt_id)
        if state is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no cluster {adopt_id}")
        return state

    async def machine_gpus(self, account: ProviderAccount, machine_type: str) -> GpuInfo | None:
        return GpuInfo("H100", 8, "nvidia-h100")

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        return ()

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        return 1

    async def validate_substrate(
        self, account: ProviderAccount, substrate: Mapping[str, Any], *, path: str
    ) -> list[Problem]:
        return []


class Accounts:
    """The one provider account every run reads (`ProviderAccounts.get`), without a store row or a secret."""

    async def get(self, tenant_id: str, name: str) -> ProviderAccount:
        if name not in (ACCOUNT, SECOND_ACCOUNT):
            raise ComputeError(ErrorCode.NOT_FOUND, f"no provider account named {name!r}", "/account")
        return ProviderAccount(name=name, provider=PROVIDER, tenant_id=tenant_id, config={})


class World:
    """One store, one SimClock, the fake driver, and an engine that runs only the clusters reconciler."""

    def __init__(self, db: Database, clock: SimClock) -> None:
        self.db = db
        self.clock = clock
        self.driver = FakeDriver()
        self.woken = 0
        self.k = KubernetesContext(
            db=db,
            clock=clock,
            feed=ChangeFeed(db),
            drivers={PROVIDER: self.driver},
            accounts=Accounts(),  # type: ignore[arg-type]
            agent=None,
            wake=self._wake,
            reviewers=JoinReviewers(clock),
        )
        self.engine = Engine(db, clock, [ClustersReconciler(self.k)], owner="clusters-test", lease_seconds=60)

    def _wake(self) -> None:
        self.woken += 1

    async def record(self, pool_id: str = "pool-0001", policy: dict[str, Any] | None = None) -> str:
        """What the substrate does when the document changes: the rows (the intent), and the cluster queued."""
        async with self.db.transaction() as session:
            row, _ = await record_desired(
                session,
                now=self.clock.now(),
                tenant_id=TENANT,
                pool_id=pool_id,
                provider=PROVIDER,
                desired=desired_substrate(pool_id, policy or substrate()),
            )
            cluster_id = row.id
        await self.engine.submit(CLUSTER_KIND, cluster_id)
        return cluster_id

    async def run(self) -> None:
        """Run what is due now: exactly the one cluster item."""
        assert await self.engine.run_once() == 1

    async def next_run(self, *, key: str | None = None) -> float:
        """Move the clock to the item's due time and run it; returns how long that was."""
        item = await self.item(key=key)
        assert item.due_at is not None, "the item is not due again"
        waited = (item.due_at - self.clock.now()).total_seconds()
        self.clock.advance_to(item.due_at)
        await self.run()
        return waited

    async def item(self, kind: str = CLUSTER_KIND, *, key: str | None = None) -> WorkItem:
        """The work item of `kind` (the one there is, or the one of `key`)."""
        query = select(WorkItem).where(WorkItem.kind == kind)
        if key is not None:
            query = query.where(WorkItem.key == key)
        async with self.db.session() as session:
            found = await session.scalar(query)
        assert found is not None
        return found

    async def due_in(self, *, key: str | None = None) -> float:
        """Seconds until the cluster item is due again."""
        item = await self.item(key=key)
        assert item.due_at is not None
        return (item.due_at - self.clock.now()).total_seconds()

    async def cluster(self, cluster_id: str) -> ClusterRow:
        async with self.db.session() as session:
            row = await session.get(ClusterRow, cluster_id)
        assert row is not None
        return row

    async def node_pools(self, cluster_id: str) -> list[NodePoolRow]:
        async with self.db.session() as session:
            rows = await session.scalars(
                select(NodePoolRow).where(NodePoolRow.cluster_id == cluster_id).order_by(NodePoolRow.name)
            )
            return list(rows)

    async def set_cluster(self, cluster_id: str, **values: Any) -> None:
        """What the substrate writes on the cluster row (`claimed_at`, `delete_requested`)."""
        async with self.db.transaction() as session:
            await session.execute(update(ClusterRow).where(ClusterRow.id == cluster_id).values(**values))

    async def claimed(self, cluster_id: str) -> None:
        """The substrate took the in-cluster claim, and woke the clusters reconciler."""
        await self.set_cluster(cluster_id, claimed_at=self.clock.now())
        await self.engine.submit(CLUSTER_KIND, cluster_id)

    async def up(self, pool_id: str = "pool-0001", policy: dict[str, Any] | None = None) -> tuple[str, str]:
        """A cluster made, ready and claimed, with its node pools ready; returns (row id, provider id)."""
        cluster_id = await self.record(pool_id, policy)
        await self.run()
        row = await self.cluster(cluster_id)
        assert row.provider_cluster_id is not None
        self.driver.ready(row.provider_cluster_id)
        await self.claimed(cluster_id)
        await self.run()
        for pool in await self.node_pools(cluster_id):
            self.driver.pool_ready(row.provider_cluster_id, pool.name)
        self.clock.advance(await self.due_in())
        await self.run()
        return cluster_id, row.provider_cluster_id
