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

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from better_compute.core.clock import Clock, SystemClock
from better_compute.core.conformance import ConformanceCase
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.kubernetes.provider import Accelerators, ClusterCredentials, ProviderKubernetes
from better_compute.testing.conformance_kubernetes_clusters import (
    adopt_read_and_extend,
    cluster_created_idempotently,
    cluster_mode_never_changes,
    cluster_upgrades,
    clusters_listed_with_their_mark,
    credentials_accepted,
    delete_twice,
)
from better_compute.testing.conformance_kubernetes_pools import node_pool_shape, node_pools, zero_nodes
from better_compute.testing.conformance_quota import quotas_answered
from better_compute.vps.provider import ProviderAccount, ProviderImpl, SecretResolver

__all__ = ["KubernetesSubject", "PoolShape", "kubernetes_provider_conformance_cases"]


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
            cluster_created_idempotently,
        ),
        ConformanceCase(
            "clusters-listed-with-their-mark",
            "list_clusters lists a cluster made with better-compute's substrate-pool label, whose substrate_pool "
            "names that pool, and answers the mark of no cluster made without it (the orphan sweep's reading)",
            clusters_listed_with_their_mark,
        ),
        ConformanceCase(
            "cluster-mode-never-changes",
            "ensure_cluster with another private_nodes mode is refused (INVALID_STATE) and changes nothing",
            cluster_mode_never_changes,
        ),
        ConformanceCase(
            "cluster-upgrades-in-place",
            "upgrade_versions offers the new version, upgrade_cluster moves the same cluster to it, and "
            "upgrade_node_pool then moves a node pool's nodes to it",
            cluster_upgrades,
        ),
        ConformanceCase(
            "node-pools-labelled-gpu-spot-resized-in-place",
            "a labelled GPU node pool and a Spot one are made, read back and resized in place",
            node_pools,
        ),
        ConformanceCase(
            "node-pool-never-changes-shape",
            "ensure_node_pool with another machine type for an existing pool is refused (INVALID_STATE)",
            node_pool_shape,
        ),
        ConformanceCase(
            "zero-nodes",
            "node_count 0 is refused as INVALID_INPUT when zero_nodes is false, else made",
            zero_nodes,
        ),
        ConformanceCase(
            "credentials-accepted",
            "credentials() is a credential for the cluster endpoint that the endpoint accepts, used 600 s at "
            "most, and refused by the cluster once its real lifetime is over",
            credentials_accepted,
        ),
        ConformanceCase("delete-twice", "delete_node_pool and delete_cluster succeed when called twice", delete_twice),
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
            adopt_read_and_extend,
        ),
    ]
