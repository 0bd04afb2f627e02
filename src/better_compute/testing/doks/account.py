"""DigitalOcean's account and Droplets endpoints: `GET /v2/account` (its `droplet_limit`) and `GET /v2/droplets`.

Every DOKS node is a Droplet, so an account's Droplets are its clusters' nodes and those a test
says run outside them (`emulator.run_droplets(3)`). The limit is `faults.droplet_limit` when a
test sets one, else `DEFAULT_DROPLET_LIMIT`, and creating nodes past it is refused (operations.py).
A token without the scope a read needs (`faults.forbid("account:read")`) answers 403 Forbidden, as
DigitalOcean answers a custom-scoped token.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING, Any

from better_compute.testing.doks.model import GOING, Cluster

if TYPE_CHECKING:
    from better_compute.testing.doks.emulator import DoksEmulator

__all__ = ["DEFAULT_DROPLET_LIMIT", "account_json", "droplets_in_use", "droplets_json"]

DEFAULT_DROPLET_LIMIT = 1000
"""The droplet limit of an account no test has limited."""


def _uuid(seed: str) -> str:
    return str(uuid.UUID(hashlib.sha256(seed.encode()).hexdigest()[:32]))


def _nodes(emu: DoksEmulator, team: str) -> list[tuple[Cluster, str, str, str]]:
    """(cluster, droplet id, node name, size) of every node of the team's clusters still there."""
    return [
        (cluster, node.droplet_id, node.name, pool.size)
        for cluster in emu.clusters.values()
        if cluster.team == team
        for pool in cluster.pools
        if pool.gone_at is None
        for node in pool.nodes
        if node.state not in GOING
    ]


def droplets_in_use(emu: DoksEmulator, team: str) -> int:
    return len(_nodes(emu, team)) + emu.droplets_elsewhere.get(team, 0)


def account_json(emu: DoksEmulator, team: str) -> dict[str, Any]:
    limit = emu.faults.droplet_limit
    return {
        "account": {
            "droplet_limit": DEFAULT_DROPLET_LIMIT if limit is None else limit,
            "floating_ip_limit": 3,
            "volume_limit": 100,
            "email": f"{team}@example.com",
            "uuid": _uuid(f"user:{team}"),
            "email_verified": True,
            "status": "active",
            "status_message": "",
            "team": {"uuid": _uuid(f"team:{team}"), "name": team},
        }
    }


def droplets_json(emu: DoksEmulator, team: str, *, per_page: int, page: int) -> dict[str, Any]:
    droplets: list[dict[str, Any]] = [
        {
            "id": int(droplet_id),
            "name": name,
            "status": "active",
            "size_slug": size,
            "region": {"slug": cluster.region},
            "tags": ["k8s", f"k8s:{cluster.id}", "k8s:worker"],
        }
        for cluster, droplet_id, name, size in _nodes(emu, team)
    ]
    droplets += [
        {"id": 900_000_000 + i, "name": f"droplet-{i}", "status": "active", "size_slug": "s-1vcpu-1gb", "tags": []}
        for i in range(emu.droplets_elsewhere.get(team, 0))
    ]
    start = (page - 1) * per_page
    shown = droplets[start : start + per_page]
    pages: dict[str, str] = {}
    if start + per_page < len(droplets):
        pages["next"] = f"https://api.digitalocean.com/v2/droplets?page={page + 1}&per_page={per_page}"
    return {"droplets": shown, "links": {"pages": pages} if pages else {}, "meta": {"total": len(droplets)}}
