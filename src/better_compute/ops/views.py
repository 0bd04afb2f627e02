"""JSON views of the services' values: camelCase keys, ISO-8601 times, no secrets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["View", "iso"]

View = dict[str, Any]


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
