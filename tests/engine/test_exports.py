"""The engine's public surface is decided: exactly the names the contract promises, and a few more."""

from __future__ import annotations

import better_compute.engine as engine
import better_compute.server as server


def test_engine_exports() -> None:
    promised = {"Outcome", "TemporaryError", "PermanentError", "RunContext", "Reconciler", "Engine", "enqueue"}
    schedules = {"DEFAULT_ERROR_BACKOFF", "DELETE_BACKOFF", "ADOPT_RETRY", "SCHEDULES", "Backoff"}
    assert set(engine.__all__) == promised | schedules | {"LeaseLost"}
    for name in engine.__all__:
        assert getattr(engine, name) is not None


def test_server_exports() -> None:
    assert {"better_compute", "Compute"} <= set(server.__all__)
