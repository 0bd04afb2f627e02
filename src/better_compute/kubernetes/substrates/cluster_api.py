"""The substrate's reach into its cluster for one run: a lightkube client on a fresh credential.

The credential is minted through the driver (600 s), used for this run only, and
dropped with the client: never stored, sealed, logged or returned. Kubernetes and
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
from better_compute.kubernetes.provider import ProviderKubernetes
from better_compute.vps.provider import ProviderAccount

__all__ = ["cluster_client", "kube_call", "missing_ok"]

T = TypeVar("T")


@asynccontextmanager
async def cluster_client(
    driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str
) -> AsyncIterator[AsyncClient]:
    credentials = await driver.credentials(account, cluster_id)
    client = kube_client(credentials)
    try:
        yield client
    finally:
        await client.close()
        del credentials


async def kube_call(what: str, call: Awaitable[T]) -> T:
    """Await a lightkube call; its failure is a ComputeError that says `what` failed and why."""
    try:
        return await call
    except ApiError as exc:
        code = {401: ErrorCode.PERMISSION_DENIED, 403: ErrorCode.PERMISSION_DENIED, 404: ErrorCode.NOT_FOUND}.get(
            exc.status.code or 0, ErrorCode.UNAVAILABLE
        )
        raise ComputeError(code, f"{what}: the cluster answered {exc.status.code} {exc.status.message}") from exc
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
