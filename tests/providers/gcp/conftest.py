"""Fixtures of the gcp tests: `gke`, a fresh GKE world per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from gke_world import Gke, gke_world


@pytest.fixture
async def gke() -> AsyncIterator[Gke]:
    async with gke_world() as world:
        yield world
