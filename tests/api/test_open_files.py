"""`better-compute serve` raises its open-files soft limit: each connected node holds a socket."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from better_compute.api.serving import raise_open_files_limit


@pytest.fixture
def lowered() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))  # a process may lower its soft limit
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_limit_is_raised_to_the_hard_limit(lowered: int) -> None:
    assert raise_open_files_limit() == lowered
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (lowered, lowered)
    assert raise_open_files_limit() == lowered, "already there: nothing to do"
