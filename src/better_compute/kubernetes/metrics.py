"""Prometheus metrics of the substrates (served by `/metrics` from prometheus-client's default registry)."""

from __future__ import annotations

from prometheus_client import Counter

__all__ = ["REPLACEMENTS"]

REPLACEMENTS = Counter(
    "better_compute_substrate_replacements",
    "Machines the substrate asked its provider to replace because a GPU on them needs a reset or is lost.",
    ["provider"],
)
