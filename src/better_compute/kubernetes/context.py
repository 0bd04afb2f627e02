"""What both reconcilers and the services share: the store, the clock, the drivers, the accounts.

Drivers are the providers' `ProviderKubernetes`, each wrapped so that every call is
counted (`kubernetes.calls`). An account is read per run, bound to its tenant's
secrets, and handed to its provider's driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from better_compute.compute.changes import ChangeFeed
from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.cluster_access.join_reviewer import JoinReviewers
from better_compute.kubernetes.deployment import deployment_id
from better_compute.kubernetes.provider import ProviderKubernetes
from better_compute.store import Database
from better_compute.vps.module import ProviderAccounts
from better_compute.vps.provider import ProviderAccount

__all__ = ["KubernetesContext"]


@dataclass
class KubernetesContext:
    db: Database
    clock: Clock
    feed: ChangeFeed
    drivers: Mapping[str, ProviderKubernetes]
    accounts: ProviderAccounts
    agent: SubstrateAgent | None
    wake: Callable[[], None]
    reviewers: JoinReviewers
    _deployment: str | None = field(default=None, init=False, repr=False)

    async def deployment(self) -> str:
        """This deployment's id (kubernetes/deployment.py), read once: it never changes on a database."""
        if self._deployment is None:
            self._deployment = await deployment_id(self.db, self.clock)
        return self._deployment

    def driver(self, provider: str) -> ProviderKubernetes:
        driver = self.drivers.get(provider)
        if driver is None:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                f"provider {provider!r} has no Kubernetes driver in kubernetes(providers=[...])",
                "/policy/substrate/account",
            )
        return driver

    async def account(self, tenant_id: str, name: str) -> tuple[ProviderAccount, ProviderKubernetes]:
        account = await self.accounts.get(tenant_id, name)
        return account, self.driver(account.provider)
