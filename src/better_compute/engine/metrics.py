"""Prometheus metrics of the reconcile engine, per reconciler kind.

They live in prometheus-client's default registry, which `/metrics` serves; several
engines in one process (tests, replicas in one interpreter) add to the same series.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = ["RECONCILE_DURATION", "RECONCILE_ERRORS", "RECONCILE_RUNS", "RECONCILE_STALE"]

RECONCILE_RUNS = Counter(
    "better_compute_reconcile_runs", "Reconcile runs by kind and how they ended.", ["kind", "result"]
)
RECONCILE_ERRORS = Counter(
    "better_compute_reconcile_errors", "Reconcile runs that raised, by kind and error class.", ["kind", "error"]
)
RECONCILE_STALE = Counter(
    "better_compute_reconcile_stale", "Completions dropped because the lease had passed to another worker.", ["kind"]
)
RECONCILE_DURATION = Histogram(
    "better_compute_reconcile_duration_seconds",
    "Wall time of one reconcile run, by kind.",
    ["kind"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0),
)
