"""Faults a test injects into the emulated DigitalOcean account.

emulator.faults.quota(droplets=2)              # more Droplets than 2 -> 422 droplet limit
emulator.faults.forbid("account:read")         # a token without that scope -> 403 on GET /v2/account
emulator.faults.stockout("gpu-h100x8-640gb")   # that size -> 422 not available
emulator.faults.refuse_delete(cluster_id)      # DELETE of that cluster (None: any) -> 422
emulator.faults.control_plane_never_answers()  # clusters made from now on never come up
emulator.faults.throttle(3)                    # the next 3 requests -> 429 with retry-after
await emulator.faults.reclaim_spot(cluster_id) # a Spot node is taken back (and replaced later)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from better_compute.testing.doks.emulator import DoksEmulator

__all__ = ["DoksFaults", "RefusedDelete"]

ANY = "*"


@dataclass(frozen=True)
class RefusedDelete:
    status: int
    error_id: str
    message: str


class DoksFaults:
    """The standing faults of one emulator; each method switches one on (or off)."""

    def __init__(self, emulator: DoksEmulator) -> None:
        self._emulator = emulator
        self.droplet_limit: int | None = None
        self.stockouts: set[str] = set()
        self.refused_deletes: dict[str, RefusedDelete] = {}
        self.hang_new_clusters = False
        self.throttled_requests = 0
        self.forbidden_scopes: set[str] = set()

    def quota(self, droplets: int | None) -> None:
        """Limit the Droplets (nodes) the account may run; None lifts the limit."""
        self.droplet_limit = droplets

    def forbid(self, scope: str) -> None:
        """Every token lacks `scope` (`account:read`, `droplet:read`): the reads needing it answer 403."""
        self.forbidden_scopes.add(scope)

    def stockout(self, size: str, *, out: bool = True) -> None:
        """Make `size` unavailable (or available again with `out=False`)."""
        if out:
            self.stockouts.add(size)
        else:
            self.stockouts.discard(size)

    def refuse_delete(
        self,
        cluster_id: str | None = None,
        message: str = "cluster cannot be deleted: it has resources attached that are still in use",
        *,
        status: int = 422,
        error_id: str = "unprocessable_entity",
    ) -> None:
        """Refuse DELETE of `cluster_id` (every cluster when None), e.g. status 403 "forbidden"."""
        self.refused_deletes[cluster_id or ANY] = RefusedDelete(status, error_id, message)

    def allow_delete(self, cluster_id: str | None = None) -> None:
        self.refused_deletes.pop(cluster_id or ANY, None)

    def refused_delete(self, cluster_id: str) -> RefusedDelete | None:
        return self.refused_deletes.get(cluster_id) or self.refused_deletes.get(ANY)

    def control_plane_never_answers(self, cluster_id: str | None = None) -> None:
        """This cluster's control plane (every cluster made from now on when None) never answers:
        it stays `provisioning` and its Kubernetes API hangs."""
        if cluster_id is None:
            self.hang_new_clusters = True
        else:
            self._emulator.hang(cluster_id)

    def throttle(self, requests: int = 1) -> None:
        """Answer the next `requests` requests with 429 too_many_requests."""
        self.throttled_requests += requests

    async def reclaim_spot(self, cluster_id: str, node_name: str | None = None) -> str:
        """DigitalOcean takes back a running Spot node (the first one when not named); a
        replacement is provisioned. Returns the reclaimed node's name."""
        return await self._emulator.reclaim_spot(cluster_id, node_name)
