"""The provider's admin credentials for created clusters, shared for a short while in memory.

Every substrate run and every node's identity check at join needs the cluster's admin
credential, which a driver mints at the provider (a call each: GKE and DOKS ask their
API, EKS presigns). Minting one per use cost a provider read per run and per joining
Node. A credential minted here is reused for at most `REUSE_SECONDS` of its 600 s life,
so whoever takes it has at least 500 s left; it lives in this process's memory only,
never in the database, a log or an answer. Concurrent asks for one cluster share one mint.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from lightkube import AsyncClient

from better_compute.core.clock import Clock
from better_compute.kubernetes.provider import CREDENTIAL_TTL_SECONDS, ClusterCredentials, ProviderKubernetes
from better_compute.kubernetes.substrates.cluster_api import credentials_client
from better_compute.vps.provider import ProviderAccount

__all__ = ["REUSE_SECONDS", "CredentialCache"]

REUSE_SECONDS = 100


class CredentialCache:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._kept: dict[tuple[str, str, str], ClusterCredentials] = {}
        self._minting: defaultdict[tuple[str, str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

    async def get(self, driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str) -> ClusterCredentials:
        """A credential for the cluster minted at most `REUSE_SECONDS` ago; minted now when there is none."""
        key = (account.tenant_id, account.name, cluster_id)
        fresh_until = self.clock.now() + timedelta(seconds=CREDENTIAL_TTL_SECONDS - REUSE_SECONDS)
        self._kept = {k: kept for k, kept in self._kept.items() if kept.expires_at >= fresh_until}
        async with self._minting[key]:
            if key not in self._kept:
                self._kept[key] = await driver.credentials(account, cluster_id)
            return self._kept[key]

    @asynccontextmanager
    async def client(
        self, driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str
    ) -> AsyncIterator[AsyncClient]:
        """A Kubernetes client on the cluster as its admin, closed when the block ends."""
        async with credentials_client(await self.get(driver, account, cluster_id)) as client:
            yield client
