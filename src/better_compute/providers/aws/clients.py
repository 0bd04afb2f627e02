"""boto3 clients per region, and the bounded thread pool every blocking call runs in.

Clients are built once per (service, region) and shared: botocore clients are
thread-safe, sessions are not, so building happens under a lock. botocore's own
retries are off (one attempt): the reconcile engine is the one place that decides
to retry, and a throttled call comes back as UNAVAILABLE with `retry_after`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.credentials import ReadOnlyCredentials

from better_compute.core.redaction import redact_value
from better_compute.providers.aws.errors import aws_errors

__all__ = ["AwsClients", "AwsCredentials"]

T = TypeVar("T")


@dataclass(frozen=True)
class AwsCredentials:
    """Static credentials; without them boto3's default chain (environment, profile,
    instance role) is used."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


class AwsClients:
    """Per-region eks/ec2/sts clients on one boto3 session, and the driver's executor."""

    def __init__(self, *, endpoint: str | None, credentials: AwsCredentials | None, max_workers: int) -> None:
        self._endpoint = endpoint
        if credentials is not None:  # held as long as the driver: pinned, never forgotten by redaction
            redact_value(credentials.secret_access_key, pinned=True)
            if credentials.session_token:
                redact_value(credentials.session_token, pinned=True)
            self._session = boto3.session.Session(
                aws_access_key_id=credentials.access_key_id,
                aws_secret_access_key=credentials.secret_access_key,
                aws_session_token=credentials.session_token,
            )
        else:
            self._session = boto3.session.Session()
        self._config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=max_workers,
        )
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="bc-aws")

    def client(self, service: str, region: str) -> Any:
        """A botocore client; call only from the executor (building one may block)."""
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = self._session.client(
                    service,  # type: ignore[call-overload]
                    region_name=region,
                    endpoint_url=self._endpoint,
                    config=self._config,
                )
            return self._clients[key]

    def frozen_credentials(self) -> ReadOnlyCredentials:
        """The current credentials (refreshed by botocore when they rotate)."""
        with self._lock:
            credentials = self._session.get_credentials()
        if credentials is None:
            from botocore.exceptions import NoCredentialsError

            raise NoCredentialsError()
        return credentials.get_frozen_credentials()

    async def call(self, operation: str, service: str, region: str, fn: Callable[[Any], T]) -> T:
        """Run `fn(client)` in the pool, the client built there too; botocore errors
        leave as ComputeError."""
        return await self.run(operation, lambda: fn(self.client(service, region)))

    async def run(self, operation: str, fn: Callable[[], T]) -> T:
        """Run one blocking step in the pool; botocore errors become ComputeError."""
        loop = asyncio.get_running_loop()

        def step() -> T:
            with aws_errors(operation):
                return fn()

        return await loop.run_in_executor(self._executor, step)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
