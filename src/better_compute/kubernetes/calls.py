"""Every provider and Kubernetes call the module makes, counted by provider, method and access.

`CALLS` is one in-process tally that tests and the benchmarks read (`CALLS.snapshot()`,
`CALLS.writes(provider=...)`), and the same counts go to `/metrics` as
`better_compute_provider_calls_total` and `better_compute_kubernetes_calls_total`.
Provider calls are counted at the `ProviderKubernetes` seam by `CountedDriver`; Kubernetes
calls by a request hook on each lightkube client `kube_client` builds.

A test that must act at a call (crash right after it, pause at it) watches the calls made
in a block of its own, and in the tasks started there (a context variable, so another
Compute or test in the process is not watched, and nothing is left behind when the block
ends):

    with watch_calls(observe):  # async def observe(call: Call) -> None
        await compute.run_until_idle()

A provider call is seen once it has returned (or failed), a Kubernetes call as it is sent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from prometheus_client import Counter as PromCounter

from better_compute.core.errors import Problem
from better_compute.kubernetes.provider import (
    Autoscaling,
    ClusterCredentials,
    ClusterSpec,
    ClusterState,
    GpuInfo,
    KubernetesVocabulary,
    NodePoolSpec,
    NodePoolState,
    ProviderKubernetes,
    Quota,
    QuotaNeed,
)
from better_compute.vps.provider import ProviderAccount

__all__ = ["CALLS", "Call", "CallTally", "CountedDriver", "Observer", "count_kubernetes_call", "watch_calls"]

PROVIDER_CALLS = PromCounter(
    "better_compute_provider_calls",
    "Provider API calls, by provider, method and read or write.",
    ["provider", "method", "access"],
)
KUBERNETES_CALLS = PromCounter(
    "better_compute_kubernetes_calls",
    "Kubernetes API calls, by HTTP method, resource and read or write.",
    ["method", "resource", "access"],
)

WRITES = frozenset(
    {
        "ensure_cluster",
        "delete_cluster",
        "upgrade_cluster",
        "upgrade_node_pool",
        "ensure_node_pool",
        "resize_node_pool",
        "delete_node_pool",
        "remove_machines",
    }
)
"""Driver methods that may change something at the provider; every other one only reads."""


class Call(NamedTuple):
    api: str  # a provider name, or "kubernetes"
    method: str
    access: str  # "read" | "write"


Observer = Callable[[Call], Awaitable[None]]

_WATCHING: ContextVar[tuple[Observer, ...]] = ContextVar("better_compute_calls_watching", default=())
"""The observers of the current context: set by `watch_calls`, inherited by the tasks started under it."""


@contextmanager
def watch_calls(observer: Observer) -> Iterator[None]:
    """Call `observer` at every call made in this block and in the tasks it starts (see the module
    docstring); an exception it raises is raised by the call. Blocks nest: each one's observer is called."""
    token = _WATCHING.set((*_WATCHING.get(), observer))
    try:
        yield
    finally:
        _WATCHING.reset(token)


class CallTally:
    """Counts by (api, method, access); the context's watchers (`watch_calls`) see each call too."""

    def __init__(self) -> None:
        self.counts: Counter[Call] = Counter()

    def snapshot(self) -> Counter[Call]:
        return Counter(self.counts)

    def since(self, before: Mapping[Call, int]) -> Counter[Call]:
        """What was counted after `before` (a snapshot)."""
        now = self.snapshot()
        now.subtract(before)
        return Counter({k: v for k, v in now.items() if v > 0})

    async def record(self, call: Call) -> None:
        self.counts[call] += 1
        if call.api == "kubernetes":
            KUBERNETES_CALLS.labels(*call).inc()
        else:
            PROVIDER_CALLS.labels(*call).inc()
        for observer in _WATCHING.get():
            await observer(call)


CALLS = CallTally()


def _resource(path: str) -> str:
    """`.../api/v1/namespaces/x/configmaps/y` -> `configmaps`; `.../api/v1/namespaces/x` -> `namespaces`."""
    parts = [p for p in path.split("/") if p]
    for marker, skip in (("apis", 2), ("api", 1)):
        if marker in parts:
            parts = parts[parts.index(marker) + 1 + skip :]
            break
    if len(parts) > 2 and parts[0] == "namespaces":
        return parts[2]
    return parts[0] if parts else ""


async def count_kubernetes_call(method: str, path: str) -> None:
    access = "read" if method in ("GET", "HEAD") else "write"
    await CALLS.record(Call("kubernetes", f"{method} {_resource(path)}", access))


@dataclass
class CountedDriver:
    """A `ProviderKubernetes` that counts every call it forwards (see the module docstring)."""

    inner: ProviderKubernetes
    provider: str
    vocabulary: KubernetesVocabulary = field(init=False)

    def __post_init__(self) -> None:
        self.vocabulary = self.inner.vocabulary

    async def _count(self, method: str) -> None:
        await CALLS.record(Call(self.provider, method, "write" if method in WRITES else "read"))

    async def _forward(self, method: str, call: Awaitable[Any]) -> Any:
        try:
            return await call
        finally:
            await self._count(method)

    async def ensure_cluster(self, account: ProviderAccount, spec: ClusterSpec) -> ClusterState:
        result: ClusterState = await self._forward("ensure_cluster", self.inner.ensure_cluster(account, spec))
        return result

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState | None:
        result: ClusterState | None = await self._forward("get_cluster", self.inner.get_cluster(account, cluster_id))
        return result

    async def find_cluster(self, account: ProviderAccount, name: str, location: str) -> ClusterState | None:
        result: ClusterState | None = await self._forward(
            "find_cluster", self.inner.find_cluster(account, name, location)
        )
        return result

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        result: tuple[Quota, ...] = await self._forward("quotas", self.inner.quotas(account, place, needs))
        return result

    async def list_clusters(self, account: ProviderAccount) -> tuple[ClusterState, ...]:
        result: tuple[ClusterState, ...] = await self._forward("list_clusters", self.inner.list_clusters(account))
        return result

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        await self._forward("delete_cluster", self.inner.delete_cluster(account, cluster_id))

    async def upgrade_cluster(self, account: ProviderAccount, cluster_id: str, version: str) -> ClusterState:
        result: ClusterState = await self._forward(
            "upgrade_cluster", self.inner.upgrade_cluster(account, cluster_id, version)
        )
        return result

    async def upgrade_versions(self, account: ProviderAccount, cluster_id: str) -> tuple[str, ...]:
        result: tuple[str, ...] = await self._forward(
            "upgrade_versions", self.inner.upgrade_versions(account, cluster_id)
        )
        return result

    async def upgrade_node_pool(
        self, account: ProviderAccount, cluster_id: str, name: str, version: str
    ) -> NodePoolState:
        result: NodePoolState = await self._forward(
            "upgrade_node_pool", self.inner.upgrade_node_pool(account, cluster_id, name, version)
        )
        return result

    async def ensure_node_pool(self, account: ProviderAccount, cluster_id: str, spec: NodePoolSpec) -> NodePoolState:
        result: NodePoolState = await self._forward(
            "ensure_node_pool", self.inner.ensure_node_pool(account, cluster_id, spec)
        )
        return result

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState | None:
        result: NodePoolState | None = await self._forward(
            "get_node_pool", self.inner.get_node_pool(account, cluster_id, name)
        )
        return result

    async def resize_node_pool(
        self,
        account: ProviderAccount,
        cluster_id: str,
        name: str,
        node_count: int,
        autoscaling: Autoscaling | None = None,
    ) -> NodePoolState:
        result: NodePoolState = await self._forward(
            "resize_node_pool", self.inner.resize_node_pool(account, cluster_id, name, node_count, autoscaling)
        )
        return result

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        await self._forward("delete_node_pool", self.inner.delete_node_pool(account, cluster_id, name))

    async def remove_machines(
        self,
        account: ProviderAccount,
        cluster_id: str,
        pool_name: str,
        provider_ids: tuple[str, ...],
        *,
        replace: bool,
    ) -> None:
        await self._forward(
            "remove_machines",
            self.inner.remove_machines(account, cluster_id, pool_name, provider_ids, replace=replace),
        )

    async def credentials(self, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        result: ClusterCredentials = await self._forward("credentials", self.inner.credentials(account, cluster_id))
        return result

    async def read_adoptable(self, account: ProviderAccount, adopt_id: str) -> ClusterState:
        result: ClusterState = await self._forward("read_adoptable", self.inner.read_adoptable(account, adopt_id))
        return result

    async def machine_gpus(self, account: ProviderAccount, machine_type: str) -> GpuInfo | None:
        result: GpuInfo | None = await self._forward("machine_gpus", self.inner.machine_gpus(account, machine_type))
        return result

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        return self.inner.zone_count(account, zones)

    async def validate_substrate(
        self, account: ProviderAccount, substrate: Mapping[str, Any], *, path: str
    ) -> list[Problem]:
        return await self.inner.validate_substrate(account, substrate, path=path)
