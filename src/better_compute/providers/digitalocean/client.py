"""pydo, run in the driver's own bounded thread pool.

One pydo client per call, built with the account's token (resolved from its
`secret://` reference just before, held in memory only for that call) and closed
after it. pydo's own retries are off: a 429 comes back at once as UNAVAILABLE with
its retry-after, and the reconcile engine alone decides when to try again.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pydo
from azure.core.pipeline.policies import RetryPolicy

__all__ = ["DoApi", "Raw"]

T = TypeVar("T")
DEFAULT_ENDPOINT = "https://api.digitalocean.com"
Raw = tuple[int, Any]
"""An answer as (HTTP status, parsed body): pydo answers some 404s with the error body instead of raising."""


def raw(pipeline_response: Any, deserialized: Any, headers: Any) -> Raw:
    """pydo's `cls=` hook: keep the status next to the body."""
    return pipeline_response.http_response.status_code, deserialized


def _loopback_http(endpoint: str) -> bool:
    """Plain HTTP is allowed only to a loopback emulator; a Bearer token never crosses a network in clear."""
    parts = urlsplit(endpoint)
    if parts.scheme != "http":
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class DoApi:
    """Where pydo calls run: a bounded pool of threads, one fresh client per call."""

    def __init__(
        self,
        endpoint: str | None,
        *,
        max_workers: int = 8,
        connection_timeout: float = 10.0,
        read_timeout: float = 60.0,
    ) -> None:
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        if urlsplit(self.endpoint).scheme != "https" and not _loopback_http(self.endpoint):
            raise ValueError(f"{self.endpoint}: the API token travels only over HTTPS, or plain HTTP to loopback")
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="bc-doks")
        self._options: dict[str, Any] = {"enforce_https": False} if _loopback_http(self.endpoint) else {}
        self._connection_timeout = connection_timeout
        self._read_timeout = read_timeout

    async def call(self, token: str, operation: Callable[[Any, dict[str, Any]], T], *, group: str = "kubernetes") -> T:
        """Run `operation(client.<group>, options)` in the pool (pydo's operation groups: kubernetes,
        account, droplets); `options` go into every pydo call."""

        def run() -> T:
            with pydo.Client(
                token=token,
                endpoint=self.endpoint,
                retry_policy=RetryPolicy.no_retries(),
                connection_timeout=self._connection_timeout,
                read_timeout=self._read_timeout,
            ) as client:
                return operation(getattr(client, group), {**self._options, "cls": raw})

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
