"""Fixtures of the DOKS driver tests: a `World` per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from doks_world import CANARY, World

from better_compute.core.clock import SimClock
from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.testing.doks import DoksEmulator
from better_compute.testing.kube import KubeApiServer


@pytest.fixture
async def world(clock: SimClock) -> AsyncIterator[World]:
    async with KubeApiServer(clock) as kube, DoksEmulator(clock, kube, tokens=(CANARY,)) as doks:
        provider = digitalocean_provider(endpoint=doks.url, clock=clock)
        world = World(clock, kube, doks, provider, [])
        try:
            yield world
        finally:
            world.driver.close()
