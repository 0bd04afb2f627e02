"""What the fleet looks like now: the state a plan is computed against.

A snapshot is plain data (names, not foreign keys), so planning is a pure function
that tests drive without a database. Its fingerprint is what makes a saved plan
safe to apply later: the same state gives the same fingerprint, any change to a
site, an account or a pool gives another one. The Nodes of each pool's substrate and their
bookings (`nodes`) are what the plan's disruption lines count; they move with every booking,
so they are shown and never fingerprinted (a saved plan stays good while tenants book).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["AccountState", "NodeState", "PoolState", "SiteState", "Snapshot", "canonical_json"]


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces. What hashes and comparisons use."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class SiteState:
    id: str
    name: str
    kind: str
    region: str


@dataclass(frozen=True)
class AccountState:
    id: str
    name: str
    provider: str
    config: dict[str, Any]


@dataclass(frozen=True)
class PoolState:
    """A pool. Only active pools are matched against the document; archiving ones
    still hold their site and account until their teardown ends, and an archived
    one keeps its site (compute keeps pool history)."""

    id: str
    name: str
    site: str
    pool_class: str
    gpu_model: str
    policy: dict[str, Any]
    state: str = "active"
    teardown: str | None = None
    """While the substrate taken out of this pool is being torn down: its state and message."""


@dataclass(frozen=True)
class NodeState:
    """A Node of a pool's substrate as last listed, with the active bookings on its pool node."""

    name: str
    flavor: str | None
    """The flavor whose node pool it is in; None when its node pool is none of the substrate's."""
    zone: str | None = None
    joined: bool = False
    """Whether a pool node runs on it (its bcd joined)."""
    reservations: int = 0
    gpus: int = 0
    tenants: tuple[str, ...] = ()

    @property
    def booked(self) -> bool:
        return self.reservations > 0


@dataclass(frozen=True)
class Snapshot:
    sites: dict[str, SiteState] = field(default_factory=dict)
    accounts: dict[str, AccountState] = field(default_factory=dict)
    pools: dict[str, PoolState] = field(default_factory=dict)
    archiving: tuple[PoolState, ...] = ()
    archived_sites: frozenset[str] = frozenset()
    account_holds: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Accounts that a running teardown still needs (vps account holds), by name."""
    nodes: dict[str, tuple[NodeState, ...]] = field(default_factory=dict)
    """The Nodes of each active pool's substrate, by pool name (read for a plan, never fingerprinted)."""

    @classmethod
    def of(
        cls,
        sites: list[SiteState],
        accounts: list[AccountState],
        pools: list[PoolState],
        account_holds: dict[str, tuple[str, ...]] | None = None,
        nodes: dict[str, tuple[NodeState, ...]] | None = None,
    ) -> Snapshot:
        active = [p for p in pools if p.state == "active"]
        archiving = tuple(sorted((p for p in pools if p.state == "archiving"), key=lambda p: p.id))
        return cls(
            sites={s.name: s for s in sites},
            accounts={a.name: a for a in accounts},
            pools={p.name: p for p in active},
            archiving=archiving,
            archived_sites=frozenset(p.site for p in pools if p.state == "archived"),
            account_holds=dict(account_holds or {}),
            nodes=dict(nodes or {}),
        )

    def fingerprint(self) -> str:
        """sha256 of the canonical form of everything a plan depends on."""
        body = {
            "sites": [asdict(s) for s in sorted(self.sites.values(), key=lambda s: s.name)],
            "accounts": [asdict(a) for a in sorted(self.accounts.values(), key=lambda a: a.name)],
            "pools": [asdict(p) for p in sorted(self.pools.values(), key=lambda p: p.name)],
            "archiving": [asdict(p) for p in self.archiving],
            "archivedSites": sorted(self.archived_sites),
            "accountHolds": {name: list(holders) for name, holders in sorted(self.account_holds.items())},
        }
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()

    def users_of_site(self, name: str) -> list[str]:
        """Names of the pools, active or tearing down, that live in site `name`."""
        return sorted(p.name for p in (*self.pools.values(), *self.archiving) if p.site == name)

    def users_of_account(self, name: str) -> list[str]:
        """Names of the pools, active or tearing down, whose substrate uses account `name`."""
        return sorted(p.name for p in (*self.pools.values(), *self.archiving) if _substrate_account(p.policy) == name)


def _substrate_account(policy: dict[str, Any]) -> str | None:
    substrate = policy.get("substrate")
    if isinstance(substrate, dict):
        account = substrate.get("account")
        return account if isinstance(account, str) else None
    return None
