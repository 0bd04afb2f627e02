"""Kill a shrink inside its removal, between one machine's request and the next, then restart and converge.

A driver's remove_machines is several requests: EKS terminates each instance on its own
(TerminateInstanceInAutoScalingGroup), DOKS deletes each node on its own. A process killed after the
first leaves the provider with some of the picked machines going and the others not. The restarted
run must finish exactly the removal it had decided (the Nodes it marked `removed`), so the pool ends
with the document's Nodes, none of those the shrink kept is taken, and nothing is removed twice.
The sweep in test_crash_injection.py crashes only between driver calls; this is the window inside one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_crash_injection import NODES, PER_ZONE, Crash, Run, a_run, reclaimed

from better_compute.kubernetes.names import LEAVING_ANNOTATION
from better_compute.providers.aws.clients import AwsClients
from better_compute.store import Database
from better_compute.testing import Cloud

SHRINK = {"eks": 1, "doks": 2}
"""How far `nodes` goes down from NODES + 1: EKS removes one instance per zone of its two, DOKS two nodes."""


def killed_after_first(method: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the process die right after the first provider request `method` of a removal returns."""
    seen: list[str] = []
    if method == "TerminateInstanceInAutoScalingGroup":
        original = AwsClients.call

        async def call(self: AwsClients, operation: str, service: str, region: str, fn: Callable[[Any], Any]) -> Any:
            answer = await original(self, operation, service, region, fn)
            if operation == method and not seen:
                seen.append(operation)
                raise Crash(f"right after the first {method}")
            return answer

        monkeypatch.setattr(AwsClients, "call", call)
    return seen


async def nodes_of(run: Run) -> dict[str, str | None]:
    """The cluster's Nodes, by name, with the mark a step left on each."""
    (cluster,) = run.cloud.kube.clusters.values()
    return {
        node["metadata"]["name"]: (node["metadata"].get("annotations") or {}).get(LEAVING_ANNOTATION)
        for node in cluster.store.list(cluster.resource("v1", "Node"))
    }


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a killed process leaves connections
@pytest.mark.parametrize("provider", ["eks"])
async def test_a_shrink_killed_between_two_removals_finishes_exactly_the_removal_it_decided(
    database: Database, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with reclaimed():
        async with Cloud() as cloud:
            run = await a_run(database, cloud, provider)
            try:
                await run.apply(NODES + 1)
                await run.until(lambda: run.scaled(NODES + 1))
                target = NODES + 1 - SHRINK[provider]
                await run.apply(target)
                seen = killed_after_first("TerminateInstanceInAutoScalingGroup", monkeypatch)
                with pytest.raises(Crash):
                    await run.until(lambda: run.scaled(target))
                assert seen, "killed inside the removal"
            finally:
                await run.compute.close()
            monkeypatch.undo()
            picked = {name for name, mark in (await nodes_of(run)).items() if mark == "removed"}
            kept = set(await nodes_of(run)) - picked
            assert len(picked) == SHRINK[provider] * PER_ZONE[provider], picked
            await run.restart()
            try:
                await run.until(lambda: run.scaled(target))
                await run.cloud.advance(600)  # whatever was asked of the provider has happened by now
                await run.until(lambda: run.scaled(target))
                assert set(await nodes_of(run)) == kept, "exactly the picked machines went"
                assert len(kept) == target * PER_ZONE[provider]
                assert run.clusters() == 1
            finally:
                await run.compute.close()
