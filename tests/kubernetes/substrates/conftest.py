"""Fakes for the substrate steps' unit tests: a context with just what a step reaches, no emulator.

`steps` is a fixture that makes a `StepContext` whose run records each fence in `events` (so a
test sees a provider or cluster write come after its fence), whose driver has only a vocabulary,
and whose client, database and feed are plain markers the patched helpers receive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, cast

import pytest

from better_compute.core.clock import SimClock
from better_compute.kubernetes.substrates.steps import StepContext
from better_compute.vps.provider import ProviderAccount


@dataclass
class FakeRun:
    """The run's lease, as a step uses it: `fence()` before each write it cannot guard."""

    events: list[str] = field(default_factory=list)

    async def fence(self) -> None:
        self.events.append("fence")


@dataclass
class Fakes:
    run: FakeRun
    ctx: StepContext

    @property
    def events(self) -> list[str]:
        return self.run.events

    def with_(self, **changes: Any) -> StepContext:
        return replace(self.ctx, **changes)


@pytest.fixture
def steps() -> Callable[..., Fakes]:
    def make(**changes: Any) -> Fakes:
        run = FakeRun()
        k = SimpleNamespace(db="db", feed="feed", clock=SimClock())
        vocabulary = SimpleNamespace(node_pool_label="cloud.example/pool", gpu_node="gpu-node", nodes_per_zone=False)
        ctx = StepContext(
            k=cast(Any, k),
            run=cast(Any, run),
            client=cast(Any, "client"),
            driver=cast(Any, SimpleNamespace(vocabulary=vocabulary)),
            account=ProviderAccount("main", "gke", "tenant-1", {}),
            cluster=cast(Any, SimpleNamespace(id="cluster-1", upgrade=None)),
            provider_cluster_id="projects/p/locations/l/clusters/c",
            tenant_id="tenant-1",
            pool_id="pool-1",
            now=k.clock.now(),
            agent=cast(Any, "agent"),
        )
        return Fakes(run, replace(ctx, **changes))

    return make
