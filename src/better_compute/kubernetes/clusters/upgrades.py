"""Upgrades that drain: `compute.kubernetes_clusters.upgrade(...)` records one, the substrate carries it out.

An upgrade is kept on its cluster's row (`upgrade`, JSON) from the moment it is asked until
every node runs the new version, so a run cut anywhere resumes where the last one was:

    to, from         the version asked, and the control plane's when it was asked
    pools_done       node pools whose every Node is back at `to`
    draining         the Node cordoned now, whose bookings the drain waits for
    drained          Nodes cordoned by the drain whose bookings have ended
    kept_cordoned    Nodes an operator had cordoned in the pool before: they stay cordoned there
    kept_unschedulable  Nodes already `spec.unschedulable` before: they stay so
    done             Nodes back at `to` and uncordoned

Asking is checked at once and changes nothing when refused: an unknown cluster is NOT_FOUND,
an adopted one INVALID_STATE (better-compute never changes a cluster it adopted), a version the
provider does not offer INVALID_INPUT at `/version`. Asking again for the same version is a no-op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine import enqueue
from better_compute.kubernetes.clusters.records import cluster_row
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import SUBSTRATE_KIND
from better_compute.kubernetes.provider import version_matches
from better_compute.kubernetes.tables import ClusterRow

__all__ = ["UpgradeProgress", "start_upgrade"]

_VERSION = re.compile(r"^v?\d+\.\d+(\.\d+)?([-+.][0-9A-Za-z.-]+)?$")


@dataclass
class UpgradeProgress:
    to: str
    from_version: str
    started_at: str
    pools_done: list[str] = field(default_factory=list)
    draining: str | None = None
    drained: list[str] = field(default_factory=list)
    kept_cordoned: list[str] = field(default_factory=list)
    kept_unschedulable: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "to": self.to,
            "from": self.from_version,
            "startedAt": self.started_at,
            "poolsDone": self.pools_done,
            "draining": self.draining,
            "drained": self.drained,
            "keptCordoned": self.kept_cordoned,
            "keptUnschedulable": self.kept_unschedulable,
            "done": self.done,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UpgradeProgress:
        return cls(
            to=str(data["to"]),
            from_version=str(data.get("from") or ""),
            started_at=str(data.get("startedAt") or ""),
            pools_done=list(data.get("poolsDone") or []),
            draining=data.get("draining"),
            drained=list(data.get("drained") or []),
            kept_cordoned=list(data.get("keptCordoned") or []),
            kept_unschedulable=list(data.get("keptUnschedulable") or []),
            done=list(data.get("done") or []),
            message=data.get("message"),
        )

    def view(self, listed: tuple[str, ...]) -> dict[str, Any]:
        """What the state read shows: the versions and where each listed Node stands."""
        draining = [n for n in listed if (n in self.drained or n == self.draining) and n not in self.done]
        return {
            "from": self.from_version,
            "to": self.to,
            "startedAt": self.started_at,
            "nodePoolsDone": list(self.pools_done),
            "nodesDone": [n for n in listed if n in self.done],
            "nodesDraining": draining,
            "nodesWaiting": [n for n in listed if n not in self.done and n not in draining],
            "message": self.message,
        }


def _refuse_to_change(row: ClusterRow) -> None:
    if row.mode == "adopt":
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"cluster {row.name} is adopted: better-compute never changes a cluster it adopted; upgrade it "
            "with the provider's own tools",
            "/clusterId",
        )
    if row.delete_requested or row.status not in ("ready", "updating") or not row.provider_cluster_id:
        raise ComputeError(ErrorCode.INVALID_STATE, f"cluster {row.name} is {row.status}", "/clusterId")


async def start_upgrade(k: KubernetesContext, *, tenant_id: str, cluster_id: str, version: str, now: datetime) -> None:
    """Check and record an upgrade of a created cluster to `version` (see the module docstring)."""
    if not isinstance(version, str) or not _VERSION.match(version):
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"{version!r} is not a Kubernetes version such as 1.32 or 1.32.2", "/version"
        )
    async with k.db.session() as session:
        row = await cluster_row(session, cluster_id, tenant_id=tenant_id)
    _refuse_to_change(row)
    if row.upgrade is not None:
        under_way = UpgradeProgress.from_json(row.upgrade)
        if under_way.to == version:
            return
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"an upgrade of cluster {row.name} to {under_way.to} is under way; ask again once it is done",
            "/version",
        )
    if row.version and version_matches(row.version, version):
        return
    account, driver = await k.account(tenant_id, row.account)
    offered = await driver.upgrade_versions(account, str(row.provider_cluster_id))
    if not any(version_matches(o, version) for o in offered):
        choices = ", ".join(offered) if offered else "none"
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"{row.provider} offers cluster {row.name} (at {row.version}) no upgrade to {version}; offered: {choices}",
            "/version",
        )
    async with k.db.transaction() as session:
        locked = await session.get(ClusterRow, row.id, with_for_update=True)
        if locked is None:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no cluster {cluster_id!r}", "/clusterId")
        _refuse_to_change(locked)
        if locked.upgrade is not None and UpgradeProgress.from_json(locked.upgrade).to != version:
            raise ComputeError(
                ErrorCode.INVALID_STATE, f"another upgrade of cluster {row.name} is under way", "/version"
            )
        if locked.upgrade is None:
            progress = UpgradeProgress(to=version, from_version=locked.version or "", started_at=now.isoformat())
            locked.upgrade, locked.updated_at = progress.to_json(), now
            if locked.substrate_pool_id is not None:
                await enqueue(session, kind=SUBSTRATE_KIND, key=locked.substrate_pool_id, now=now)
    k.wake()
