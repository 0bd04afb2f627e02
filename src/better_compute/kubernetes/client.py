"""A lightkube client for a cluster, built from a short-lived credential.

The kubeconfig is assembled in memory (server, CA data, bearer token): nothing
is written to disk and the token is registered for redaction. Every request has
a timeout, so a control plane that never answers surfaces as an error instead of
a hung reconcile run. Every request is counted (`kubernetes.calls`).
"""

from __future__ import annotations

import httpx2
import lightkube
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from better_compute.core.redaction import redact_value
from better_compute.kubernetes.calls import count_kubernetes_call
from better_compute.kubernetes.provider import ClusterCredentials

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "FIELD_MANAGER", "kube_client"]

DEFAULT_TIMEOUT_SECONDS = 30.0
FIELD_MANAGER = "better-compute"


def kube_client(
    credentials: ClusterCredentials,
    *,
    timeout: float | None = None,
    field_manager: str = FIELD_MANAGER,
) -> lightkube.AsyncClient:
    """An AsyncClient for `credentials.endpoint`; close it with `await client.close()`.

    `timeout` defaults to DEFAULT_TIMEOUT_SECONDS as it is when the client is made.
    """
    redact_value(credentials.token)
    config = KubeConfig.from_one(
        cluster=Cluster(server=credentials.endpoint, certificate_auth_data=credentials.ca_data),
        user=User(token=credentials.token),
    )
    client = lightkube.AsyncClient(
        config,
        timeout=httpx2.Timeout(DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout),
        field_manager=field_manager,
        trust_env=False,
    )
    # lightkube exposes no hook of its own; its httpx2 client is the one place every request passes.
    client._client._client.event_hooks["request"].append(_count)
    return client


async def _count(request: httpx2.Request) -> None:
    await count_kubernetes_call(request.method, request.url.path)
