"""The join step (`join`): a fenced join token kept for as many uses as listed Nodes wait to join."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.substrates import join_step
from better_compute.kubernetes.substrates.join_step import JoinStep
from better_compute.kubernetes.substrates.nodes_step import NodesSeen


@pytest.mark.parametrize(
    ("waiting", "message"),
    [(("n2", "n3"), "a join token for 2 Node(s) that wait to join"), ((), "no Node waits to join: no join token")],
)
async def test_the_token_is_kept_for_the_nodes_that_wait(
    steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, waiting: tuple[str, ...], message: str
) -> None:
    fakes = steps()
    kept: list[dict[str, Any]] = []

    async def keep(db: Any, run: Any, client: Any, **kw: Any) -> None:
        fakes.events.append("keep")
        kept.append({"db": db, "client": client, **kw})

    monkeypatch.setattr(join_step, "keep_join_token", keep)
    seen = NodesSeen(("n1", *waiting), ("n1",), waiting, 0, None)
    result = await JoinStep().run(fakes.with_(seen=seen))
    assert fakes.events == ["fence", "keep"]
    assert kept == [
        {"db": "db", "client": "client", "pool_id": "pool-1", "waiting": len(waiting), "now": fakes.ctx.now}
    ]
    assert (result.condition, result.status, result.message) == ("join", "ok", message)


async def test_a_failed_secret_write_is_the_error(steps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    async def keep(*_: Any, **__: Any) -> None:
        raise ComputeError(ErrorCode.UNAVAILABLE, "writing the join Secret: the cluster API did not answer")

    monkeypatch.setattr(join_step, "keep_join_token", keep)
    result = await JoinStep().run(steps(seen=NodesSeen((), (), (), 0, None)).ctx)
    assert (result.status, result.message) == ("error", "writing the join Secret: the cluster API did not answer")
