"""One lazily made google-cloud-compute client, shared by a driver's threads (instance groups, region quotas)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import google.auth.credentials
from google.api_core.client_options import ClientOptions

__all__ = ["ComputeClient"]


C = TypeVar("C")


class ComputeClient(Generic[C]):
    """Makes its client (`_new`) on first use, over the REST transport, pointed at `endpoint` when given.

    google.cloud.compute_v1 is imported then, not before: it loads every Compute Engine service
    (about 1 s), which every CLI command would otherwise pay."""

    def __init__(
        self,
        credentials: Callable[[], google.auth.credentials.Credentials],
        endpoint: str | None,
        timeout: float,
    ) -> None:
        self._credentials = credentials
        self._endpoint = endpoint
        self._timeout = timeout
        self._lock = threading.Lock()
        self._client: C | None = None

    def _new(self, module: Any, **options: Any) -> C:
        """The client, made with these options (credentials, transport, client_options)."""
        raise NotImplementedError

    def _api(self) -> C:
        from google.cloud import compute_v1

        credentials = self._credentials()
        with self._lock:
            if self._client is None:
                options = ClientOptions(api_endpoint=self._endpoint) if self._endpoint else None
                self._client = self._new(compute_v1, credentials=credentials, transport="rest", client_options=options)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                cast(Any, self._client).transport.close()
                self._client = None
