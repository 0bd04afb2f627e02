"""Before apply, the provider's own quota for the machines a plan adds: a read, and a warning, never a failure.

Where a plan grows flavors, each account and cluster place is asked once, through its driver
(`ProviderKubernetes.quotas`: GKE's region GPU quotas, EKS' vCPU quota of each instance family,
DOKS' droplet limit), how much of each quota it uses and how much the change adds; a change whose
usage plus additions passes the limit is warned about, since the provider would refuse the
machines beyond it. An autoscaled flavor counts at its upper bound, which the autoscaler may
reach. A quota that cannot be read (denied, the API off) is a warning that says so: the plan is
made all the same. Like cost and disruption, the lines are shown and never compared on apply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.core.errors import ComputeError
from better_compute.fleet.cost import FlavorChange
from better_compute.kubernetes.provider import Accelerators, ProviderKubernetes, Quota, QuotaNeed
from better_compute.vps.provider import ProviderAccount, ProviderImpl

__all__ = ["QuotaCheck", "check_quotas"]


def _number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class QuotaCheck:
    """The quotas one account and place answered for what the plan adds there, or why none was read."""

    account: str
    provider: str
    place: str
    quotas: tuple[Quota, ...] = ()
    error: str | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        if self.error is not None:
            return (
                f"account {self.account}: the {self.provider} quota could not be read ({self.error}); "
                "the plan cannot tell whether the change fits it",
            )
        return tuple(
            f"account {self.account}: {q.name} ({q.metric}{', ' + q.scope if q.scope else ''}) would be "
            f"{_number(q.usage + q.adds)} {q.unit} of a limit of {_number(q.limit)}: the provider refuses "
            "the machines beyond it"
            for q in self.quotas
            if q.exceeded
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "provider": self.provider,
            "place": self.place,
            "quotas": [
                {
                    "metric": q.metric,
                    "name": q.name,
                    "unit": q.unit,
                    "scope": q.scope,
                    "limit": q.limit,
                    "usage": q.usage,
                    "adds": q.adds,
                    "exceeded": q.exceeded,
                }
                for q in self.quotas
            ],
            "error": self.error,
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuotaCheck:
        quotas = tuple(
            Quota(
                metric=str(q["metric"]),
                name=str(q["name"]),
                unit=str(q["unit"]),
                limit=float(q["limit"]),
                usage=float(q["usage"]),
                adds=float(q["adds"]),
                scope=str(q.get("scope", "")),
            )
            for q in data.get("quotas", [])
        )
        error = data.get("error")
        return cls(
            str(data["account"]),
            str(data["provider"]),
            str(data["place"]),
            quotas,
            str(error) if error is not None else None,
        )


def _need(change: FlavorChange) -> QuotaNeed:
    gpus = change.flavor.gpus
    return QuotaNeed(
        machine_type=change.flavor.machine_type,
        count=change.after[1] - change.before[1],
        spot=change.flavor.spot,
        accelerators=Accelerators(gpus.type, gpus.count) if gpus is not None else None,
    )


async def _check(
    kube: ProviderKubernetes, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]
) -> QuotaCheck:
    try:
        quotas = await kube.quotas(account, place, needs)
    except ComputeError as error:
        return QuotaCheck(account.name, account.provider, place, error=str(error))
    return QuotaCheck(account.name, account.provider, place, tuple(quotas))


async def check_quotas(
    changes: tuple[FlavorChange, ...],
    accounts: Mapping[str, ProviderAccount],
    providers: Mapping[str, ProviderImpl],
) -> tuple[QuotaCheck, ...]:
    """One check per account and place (of `accounts`, the document's) where the changes add machines,
    asked all at once; where they only remove some, nothing is asked."""
    grouped: dict[tuple[str, str], list[FlavorChange]] = {}
    for change in changes:
        grouped.setdefault((change.account, change.place), []).append(change)
    asks = []
    for (name, place), members in sorted(grouped.items()):
        account = accounts.get(name)
        impl = providers.get(account.provider) if account is not None else None
        kube = impl.kubernetes if impl is not None else None
        needs = tuple(_need(c) for c in members)
        if account is None or kube is None or not any(n.count > 0 for n in needs):
            continue
        asks.append(_check(kube, account, place, needs))
    return tuple(await asyncio.gather(*asks))
