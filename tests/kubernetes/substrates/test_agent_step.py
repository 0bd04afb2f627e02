"""The agent step (`bcd`): bcd applied after a fence; its update marks it applied (the substrate is then
`ready` with no error anywhere), and a failed apply is its error, with nothing marked applied."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.substrates import agent_step
from better_compute.kubernetes.substrates.agent_step import AgentStep


async def test_bcd_is_applied_after_a_fence(steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = steps()
    applied: list[tuple[Any, ...]] = []

    async def apply(*args: Any) -> None:
        fakes.events.append("apply")
        applied.append(args)

    monkeypatch.setattr(agent_step, "apply_bcd", apply)
    result = await AgentStep().run(fakes.ctx)
    assert fakes.events == ["fence", "apply"]
    assert applied == [("client", "pool-1", "agent", "gpu-node")], "the provider's GPU node shapes the apply"
    assert (result.condition, result.status, result.message) == ("bcd", "ok", "applied")
    assert result.update.applied


async def test_a_failed_apply_is_the_error(steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    async def apply(*_: Any) -> None:
        raise ComputeError(ErrorCode.PERMISSION_DENIED, "applying DaemonSet bcd: forbidden")

    monkeypatch.setattr(agent_step, "apply_bcd", apply)
    result = await AgentStep().run(steps().ctx)
    assert (result.status, result.message) == ("error", "applying DaemonSet bcd: forbidden")
    assert not result.update.applied
