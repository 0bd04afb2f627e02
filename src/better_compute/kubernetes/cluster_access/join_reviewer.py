"""The join check's credential: a ServiceAccount that can do TokenReviews and nothing else.

Admin credentials are the runs' own: each substrate run mints one through the provider
(`ProviderKubernetes.credentials`) and drops it when the run ends. A join's identity check
(substrates/node_identity.py) is not a run and gets no admin credential to keep. It works as
`bc-system/bcd-join-reviewer`, bound to the ClusterRole `better-compute:join-reviewer`,
which allows `create` on `tokenreviews` and `get` on `nodes` only (narrower than the
built-in `system:auth-delegator`, which also grants SubjectAccessReviews): the check reads
the Node the review proved, to match it at join (substrates/join_match.py).

Minting the reviewer's token takes the provider's admin credential once: with it the three
objects are made where missing (labelled with the substrate's pool, so teardown removes
them) and a 600 s token is requested (TokenRequest); the admin credential is then dropped.
The reviewer's token is kept in this process's memory, never stored, logged or returned,
and reused while at least `REUSE_MARGIN_SECONDS` of it are left; concurrent joins of one
cluster share one mint.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccountToken

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.cluster_access.kube_api import create_if_absent, credentials_client, kube_call
from better_compute.kubernetes.names import BCD_NAMESPACE, substrate_labels
from better_compute.kubernetes.provider import CREDENTIAL_TTL_SECONDS, ClusterCredentials, ProviderKubernetes
from better_compute.vps.provider import ProviderAccount

__all__ = ["REUSE_MARGIN_SECONDS", "REVIEWER", "REVIEWER_ROLE", "JoinReviewers", "reviewer_objects"]

REVIEWER = "bcd-join-reviewer"
REVIEWER_ROLE = "better-compute:join-reviewer"
REUSE_MARGIN_SECONDS = 100
"""A reviewer token with less than this left is not used for a join check: a new one is minted."""
_RBAC = "rbac.authorization.k8s.io/v1"


def reviewer_objects(pool_id: str) -> list[dict[str, Any]]:
    """The reviewer's ServiceAccount, its ClusterRole (TokenReviews, reading Nodes) and the binding, in that order."""
    labels = substrate_labels(pool_id)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": REVIEWER, "namespace": BCD_NAMESPACE, "labels": labels},
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": REVIEWER_ROLE, "labels": labels},
            "rules": [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},  # the joining Node's capacity
            ],
        },
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": REVIEWER_ROLE, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": REVIEWER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": REVIEWER, "namespace": BCD_NAMESPACE}],
        },
    ]


async def _reviewer_token(client: AsyncClient, admin: ClusterCredentials, now: datetime) -> ClusterCredentials:
    request = ServiceAccountToken(
        metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=int(CREDENTIAL_TTL_SECONDS))
    )
    minted = await kube_call(
        f"requesting a token for {BCD_NAMESPACE}/{REVIEWER}", client.create(request, REVIEWER, namespace=BCD_NAMESPACE)
    )
    token = minted.status.token if minted.status else None
    if not token:
        raise ComputeError(ErrorCode.UNAVAILABLE, f"the cluster minted no token for {BCD_NAMESPACE}/{REVIEWER}")
    redact_value(token)
    return ClusterCredentials(
        endpoint=admin.endpoint,
        ca_data=admin.ca_data,
        token=token,
        expires_at=now + timedelta(seconds=CREDENTIAL_TTL_SECONDS),
    )


class JoinReviewers:
    """Per cluster, the reviewer's token for join checks (memory only)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._kept: dict[tuple[str, str, str], ClusterCredentials] = {}
        self._minting: defaultdict[tuple[str, str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

    async def get(
        self, driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str, pool_id: str
    ) -> ClusterCredentials:
        """The reviewer's token for the cluster; minted now (one admin credential, dropped) when none is fresh."""
        key = (account.tenant_id, account.name, cluster_id)
        usable_from = self.clock.now() + timedelta(seconds=REUSE_MARGIN_SECONDS)
        self._kept = {k: kept for k, kept in self._kept.items() if kept.expires_at >= usable_from}
        async with self._minting[key]:
            if key not in self._kept:
                admin = await driver.credentials(account, cluster_id)
                async with credentials_client(admin) as client:
                    for manifest in reviewer_objects(pool_id):
                        await create_if_absent(client, manifest)
                    self._kept[key] = await _reviewer_token(client, admin, self.clock.now())
                del admin
            return self._kept[key]
