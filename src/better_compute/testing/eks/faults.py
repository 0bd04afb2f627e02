"""Faults a test can inject into the EKS emulator.

Each is plain state the API handlers read, so a fault takes effect on the next
request and `clear()` puts the world back to normal. Spot reclaim acts at once
and lives on the emulator (`EksFaults.reclaim_spot` forwards to it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["EksFaults"]


@dataclass
class EksFaults:
    """What goes wrong, and where.

    - `quota(clusters=, nodegroups=)`: CreateCluster / CreateNodegroup beyond that many answer
      ResourceLimitExceededException.
    - `stockout(instance_type)`: node groups of that type fail to launch (CREATE_FAILED, or DEGRADED
      on a scale-up) with an AsgInstanceLaunchFailures health issue naming InsufficientInstanceCapacity.
    - `refuse_delete(cluster, code=, message=)`: DeleteCluster answers that error.
    - `never_answers(cluster)`: a cluster still CREATING never becomes ACTIVE; an ACTIVE one's API
      server hangs (every request to it waits until the fault is cleared).
    - `throttle(count, retry_after=)`: the next `count` AWS API requests are throttled.
    - `await reclaim_spot(node_name)`: the Spot instance behind a Node is taken back.
    """

    cluster_quota: int | None = None
    nodegroup_quota: int | None = None
    stockouts: set[str] = field(default_factory=set)
    refused_deletes: dict[str, tuple[str, str]] = field(default_factory=dict)
    silent_control_planes: set[str] = field(default_factory=set)
    throttled_requests: int = 0
    throttle_retry_after: float | None = None
    _reclaim: Callable[[str], Awaitable[None]] | None = field(default=None, repr=False)
    _silence: Callable[[str, bool], None] | None = field(default=None, repr=False)

    def quota(self, *, clusters: int | None = None, nodegroups: int | None = None) -> None:
        self.cluster_quota = clusters
        self.nodegroup_quota = nodegroups

    def stockout(self, instance_type: str) -> None:
        self.stockouts.add(instance_type)

    def refuse_delete(
        self,
        cluster: str,
        *,
        code: str = "AccessDeniedException",
        message: str = "User is not authorized to perform: eks:DeleteCluster",
    ) -> None:
        self.refused_deletes[cluster] = (code, message)

    def allow_delete(self, cluster: str) -> None:
        self.refused_deletes.pop(cluster, None)

    def never_answers(self, cluster: str) -> None:
        self.silent_control_planes.add(cluster)
        if self._silence is not None:
            self._silence(cluster, True)

    def throttle(self, count: int = 1, *, retry_after: float | None = None) -> None:
        self.throttled_requests = count
        self.throttle_retry_after = retry_after

    async def reclaim_spot(self, node_name: str) -> None:
        if self._reclaim is None:
            raise RuntimeError("these faults are not attached to an emulator")
        await self._reclaim(node_name)

    def clear(self) -> None:
        self.cluster_quota = None
        self.nodegroup_quota = None
        self.stockouts.clear()
        self.refused_deletes.clear()
        for cluster in self.silent_control_planes:
            if self._silence is not None:
                self._silence(cluster, False)
        self.silent_control_planes.clear()
        self.throttled_requests = 0
        self.throttle_retry_after = None
