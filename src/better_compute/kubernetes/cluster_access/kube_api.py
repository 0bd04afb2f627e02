"""A lightkube client for a cluster, built from a short-lived credential, and its calls' errors.

The kubeconfig is assembled in memory (server, CA data, bearer token): nothing
is written to disk and the token is registered for redaction. Every request has
a timeout, so a control plane that never answers surfaces as an error instead of
a hung reconcile run. Every request is counted (`kubernetes.calls`). The TLS context that
verifies the server is kept per cluster CA (`tls_context`): lightkube would build one per
client from a temporary file of the CA, and every run and every join makes a client.

A run's admin credential is minted through the driver (600 s), kept in that run's memory
only, and never stored, sealed, logged or returned: `cluster_client` and `credentials_client`
drop it when their block ends. Kubernetes and transport errors become ComputeErrors, so a
step can report them and the others go on.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any, TypeVar

import httpx2
import lightkube
from lightkube import ApiError, AsyncClient, codecs
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.calls import count_kubernetes_call
from better_compute.kubernetes.provider import ClusterCredentials, ProviderKubernetes
from better_compute.vps.provider import ProviderAccount

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "FIELD_MANAGER",
    "cluster_client",
    "create_if_absent",
    "credentials_client",
    "kube_call",
    "kube_client",
    "kube_error",
    "missing_ok",
    "tls_context",
]

DEFAULT_TIMEOUT_SECONDS = 30.0
FIELD_MANAGER = "better-compute"
TLS_CONTEXTS_KEPT = 256
"""Cluster CAs whose TLS context is kept (least recently used first out)."""

T = TypeVar("T")


@lru_cache(maxsize=TLS_CONTEXTS_KEPT)
def tls_context(ca_data: str | None) -> ssl.SSLContext:
    """The context that verifies a cluster's server: its CA (base64 PEM, as a kubeconfig carries it), or with
    none the system's CAs, as lightkube does. A CA is public, so it is all the cache's key holds."""
    if not ca_data:
        return httpx2.create_ssl_context(verify=True, trust_env=False)
    return ssl.create_default_context(cadata=base64.b64decode(ca_data).decode("ascii"))


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
    # `insecure` only spares lightkube building a context of its own, which no request would use:
    # every request goes through `transport`, which verifies the server against the cluster's CA.
    config = KubeConfig.from_one(
        cluster=Cluster(server=credentials.endpoint, insecure=True), user=User(token=credentials.token)
    )
    client = lightkube.AsyncClient(
        config,
        timeout=httpx2.Timeout(DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout),
        field_manager=field_manager,
        trust_env=False,
        transport=httpx2.AsyncHTTPTransport(verify=tls_context(credentials.ca_data)),
    )
    # lightkube exposes no hook of its own; its httpx2 client is the one place every request passes.
    client._client._client.event_hooks["request"].append(_count)
    return client


async def _count(request: httpx2.Request) -> None:
    await count_kubernetes_call(request.method, request.url.path)


@asynccontextmanager
async def cluster_client(
    driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str
) -> AsyncIterator[AsyncClient]:
    """A client on a fresh admin credential minted through the driver, dropped when the block ends."""
    async with credentials_client(await driver.credentials(account, cluster_id)) as client:
        yield client


@asynccontextmanager
async def credentials_client(credentials: ClusterCredentials) -> AsyncIterator[AsyncClient]:
    """A client on `credentials`, closed (and the credential dropped) when the block ends."""
    client = kube_client(credentials)
    try:
        yield client
    finally:
        await client.close()
        del credentials


def kube_error(what: str, exc: ApiError) -> ComputeError:
    """The ComputeError for a refused Kubernetes call: 401/403 PERMISSION_DENIED, 404 NOT_FOUND,
    409 CONFLICT, anything else UNAVAILABLE (retried)."""
    code = {
        401: ErrorCode.PERMISSION_DENIED,
        403: ErrorCode.PERMISSION_DENIED,
        404: ErrorCode.NOT_FOUND,
        409: ErrorCode.CONFLICT,
    }.get(exc.status.code or 0, ErrorCode.UNAVAILABLE)
    return ComputeError(code, f"{what}: the cluster answered {exc.status.code} {exc.status.message}")


async def kube_call(what: str, call: Awaitable[T]) -> T:
    """Await a lightkube call; its failure is a ComputeError that says `what` failed and why."""
    try:
        return await call
    except ApiError as exc:
        raise kube_error(what, exc) from exc
    except httpx2.HTTPError as exc:
        raise ComputeError(
            ErrorCode.UNAVAILABLE, f"{what}: the cluster API did not answer ({type(exc).__name__})"
        ) from exc


async def missing_ok(what: str, call: Awaitable[Any]) -> None:
    """Like kube_call, but an object that is already gone counts as done."""
    try:
        await kube_call(what, call)
    except ComputeError as exc:
        if exc.code is not ErrorCode.NOT_FOUND:
            raise


async def create_if_absent(client: AsyncClient, manifest: dict[str, Any]) -> None:
    """Create the object unless one of its name is there: what is there is left as it is (and is not ours)."""
    obj = codecs.from_dict(manifest)
    kind: Any = type(obj)
    meta = manifest["metadata"]
    what = f"{manifest['kind']} {meta['name']}"
    try:
        await client.get(kind, meta["name"], namespace=meta.get("namespace"))
        return
    except ApiError as exc:
        if exc.status.code != 404:
            raise kube_error(f"reading {what}", exc) from exc
    try:
        await client.create(obj)
    except ApiError as exc:
        if exc.status.code != 409:  # made meanwhile: it is there, which is all we want
            raise kube_error(f"creating {what}", exc) from exc
