"""JSON views of the services' values: camelCase keys, ISO-8601 times, no secrets.

`RowViews` makes a list row's view once per distinct row: a list's rows rarely change between
requests, and decoding each one's JSON, parsing and formatting its times and encoding its view were
most of a list request's CPU (BENCHMARKS.md). The rows are read raw (compute.listing), so a row is
its own version: an entry is the view of exactly those values and is never stale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic_core import to_json

from better_compute.compute.listing import Raw

__all__ = ["MAX_ROWS", "RowViews", "View", "iso"]

View = dict[str, Any]

MAX_ROWS = 20_000
"""The most rows a RowViews keeps encoded; when it is full it starts again empty."""


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


class RowViews:
    """One list's rows as views: fresh ones for Python callers, or the JSON array the API answers, each
    row's part encoded once (pydantic-core's encoder, as FastAPI's own, so the bytes are the same)."""

    def __init__(self, view: Callable[[Any, Raw], View]) -> None:
        self._view = view
        self._encoded: dict[tuple[Any, ...], bytes] = {}

    def views(self, rows: Sequence[Any], raw: Raw) -> list[View]:
        return [self._view(row, raw) for row in rows]

    def json(self, rows: Sequence[Any], raw: Raw) -> bytes:
        encoded = self._encoded
        parts = []
        for row in rows:
            key = tuple(row)
            part = encoded.get(key)
            if part is None:
                if len(encoded) >= MAX_ROWS:
                    encoded.clear()
                part = encoded[key] = to_json(self._view(row, raw))
            parts.append(part)
        return b"[" + b",".join(parts) + b"]"
