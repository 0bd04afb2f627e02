"""The substrate's reach into its cluster: a lightkube client on an admin credential.

The credential is minted through the driver (600 s) for one run, kept in that run's memory
only, and never stored, sealed, logged or returned. Kubernetes and
transport errors become ComputeErrors, so a step can report them and the others go on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx2
from lightkube import ApiError, AsyncClient

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.client import kube_client
from better_compute.kubernetes.provider import ClusterCredentials, ProviderKubernetes
from better_compute.vps.provider import ProviderAccount

__all__ = ["cluster_client", "credentials_client", "kube_call", "kube_error", "missing_ok"]

T = TypeVar("T")


@asynccontextmanager
async def cluster_client(
    driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str
) -> AsyncIterator[AsyncClient]:
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
