"""The reconcile engine: leased claims, token-guarded completion, backoff, wake-ups.

    from better_compute.engine import Outcome, TemporaryError, PermanentError, RunContext, Reconciler, Engine, enqueue

A module enqueues (kind, key) in the transaction that changed desired state, then
calls `engine.wake()` after commit. The engine claims due items with a lease, runs
the module's `Reconciler` for that kind, and decides (in one place, `decide.py`)
when the item runs next. Schedules are data in `schedules.py`.
"""

from better_compute.engine.engine import Engine, Reconciler, RunContext
from better_compute.engine.outcome import LeaseLost, Outcome, PermanentError, TemporaryError
from better_compute.engine.queue import enqueue
from better_compute.engine.schedules import ADOPT_RETRY, DEFAULT_ERROR_BACKOFF, DELETE_BACKOFF, SCHEDULES, Backoff

__all__ = [
    "ADOPT_RETRY",
    "DEFAULT_ERROR_BACKOFF",
    "DELETE_BACKOFF",
    "SCHEDULES",
    "Backoff",
    "Engine",
    "LeaseLost",
    "Outcome",
    "PermanentError",
    "Reconciler",
    "RunContext",
    "TemporaryError",
    "enqueue",
]
