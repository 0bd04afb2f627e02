"""The upgrade step (`upgrade`): nothing without an upgrade on the cluster's row; otherwise the upgrade is
carried one run further after a fence. Until it is done it waits (its progress is the upgrade view's, not
the substrate's message) and asks to be looked at again soon, also when a call of it failed."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.substrates import upgrade_step
from better_compute.kubernetes.substrates.steps import SOON, StepResult
from better_compute.kubernetes.substrates.upgrade_step import UpgradeRun, UpgradeStep

UPGRADE = {"from": "1.31", "to": "1.32"}


def with_upgrade(steps: Callable[..., Any]) -> Any:
    return steps(cluster=SimpleNamespace(id="cluster-1", upgrade=UPGRADE), node_pools=("gpu-a", "gpu-b"))


async def test_no_upgrade_is_ok_without_a_call(steps: Callable[..., Any]) -> None:
    fakes = steps()
    assert await UpgradeStep().run(fakes.ctx) == StepResult("upgrade", "ok", "no upgrade")
    assert fakes.events == []


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        (True, StepResult("upgrade", "ok", "upgraded to 1.32")),
        (False, StepResult("upgrade", "waiting", "upgrading to 1.32", SOON, in_message=False)),
    ],
)
async def test_an_upgrade_is_carried_on_after_a_fence(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, done: bool, expected: StepResult
) -> None:
    fakes = with_upgrade(steps)
    calls: list[tuple[UpgradeRun, dict[str, Any]]] = []

    async def advance(run: UpgradeRun, upgrade: dict[str, Any]) -> bool:
        fakes.events.append("advance")
        calls.append((run, upgrade))
        return done

    monkeypatch.setattr(upgrade_step, "advance_upgrade", advance)
    assert await UpgradeStep().run(fakes.ctx) == expected
    assert fakes.events == ["fence", "advance"]
    run, upgrade = calls[0]
    assert upgrade == UPGRADE
    assert (run.cluster_row_id, run.provider_cluster_id, run.node_pools, run.lease) == (
        "cluster-1",
        "projects/p/locations/l/clusters/c",
        ("gpu-a", "gpu-b"),
        fakes.run,
    )


async def test_a_failed_call_is_the_error_and_still_soon(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def advance(*_: Any) -> bool:
        raise ComputeError(ErrorCode.UNAVAILABLE, "the provider did not answer")

    monkeypatch.setattr(upgrade_step, "advance_upgrade", advance)
    result = await UpgradeStep().run(with_upgrade(steps).ctx)
    assert result == StepResult("upgrade", "error", "upgrading to 1.32: the provider did not answer", SOON)
