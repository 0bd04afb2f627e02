"""Watching the calls: only those made in the watching block and in the tasks it starts (no I/O)."""

from __future__ import annotations

import asyncio

import pytest

from better_compute.kubernetes.calls import CALLS, Call, count_kubernetes_call, watch_calls

PROVIDER_CALL = Call("gcp", "get_cluster", "read")


async def test_a_watcher_sees_the_calls_of_its_block_and_of_the_tasks_started_there_only() -> None:
    seen: list[Call] = []

    async def watch(call: Call) -> None:
        seen.append(call)

    async def elsewhere() -> None:
        await started.wait()
        await CALLS.record(PROVIDER_CALL)

    started = asyncio.Event()
    outside = asyncio.create_task(elsewhere())  # another Compute's run: started before the block
    with watch_calls(watch):
        inside = asyncio.create_task(CALLS.record(Call("gcp", "ensure_cluster", "write")))
        await count_kubernetes_call("GET", "/api/v1/namespaces/kube-system/configmaps/bc-claim")
        started.set()
        await asyncio.gather(inside, outside)
    await CALLS.record(PROVIDER_CALL)  # after the block
    assert sorted(seen) == [Call("gcp", "ensure_cluster", "write"), Call("kubernetes", "GET configmaps", "read")]


async def test_nested_watchers_each_see_the_call_and_one_that_raises_raises_from_the_call() -> None:
    class Crash(BaseException):
        pass

    outer: list[str] = []

    async def count(call: Call) -> None:
        outer.append(call.method)

    async def crash(call: Call) -> None:
        raise Crash(call.method)

    with watch_calls(count):
        with watch_calls(crash), pytest.raises(Crash):
            await CALLS.record(PROVIDER_CALL)
        await CALLS.record(Call("gcp", "delete_cluster", "write"))  # the inner watcher has ended
    assert outer == ["get_cluster", "delete_cluster"]
