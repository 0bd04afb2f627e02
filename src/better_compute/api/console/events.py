"""The tenant's share of the change feed, for /ui/events.

The feed (compute.changes.ChangeFeed) calls its listeners after each commit that changed
what Nodes hold (a booking, a release, a cordon), and its pool listeners after each commit
that changed how a pool is reported (a substrate's state or message); it names Nodes and
pools of every tenant. This keeps the ones of the signed-in tenant, read through ops.nodes
and ops.pools as the API would, so a stream never tells one tenant when another's changed.
Nothing polls: a stream waits on its queue until the feed fills it, and unsubscribes when
the browser goes away or the server shuts down (uvicorn waits for open responses before the
lifespan ends, so a stream must end first).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from better_compute.compute.changes import Listener
from better_compute.ops import nodes, pools
from better_compute.server import Compute

__all__ = ["Changed", "end_streams", "tenant_changes"]

_BACKLOG = 64  # changes waiting for a slow browser; past it, older ones merge into the next
Changed = dict[str, list[str]]
"""{"nodes": [...], "pools": [...]}: the ids of one batch the feed reported (either list may be empty)."""


def end_streams(closing: asyncio.Event) -> None:
    """End every stream waiting on `closing` (the server is shutting down: an open tab must not hold it)."""
    closing.set()


async def _mine(compute: Compute, tenant_id: str, changed: Changed) -> Changed:
    """The batch cut to the tenant's own Nodes and pools (retired and archived ones too: their going is news)."""
    mine: Changed = {"nodes": [], "pools": []}
    if changed["nodes"]:
        ours = {n["id"] for n in await nodes.list_nodes(compute, tenant_id, include_retired=True)}
        mine["nodes"] = sorted(set(changed["nodes"]) & ours)
    if changed["pools"]:
        ours = {p["id"] for p in await pools.list_pools(compute, tenant_id, include_archived=True)}
        mine["pools"] = sorted(set(changed["pools"]) & ours)
    return mine


async def tenant_changes(compute: Compute, tenant_id: str, closing: asyncio.Event) -> AsyncIterator[Changed]:
    """Each batch of the tenant's Node and pool ids the feed reports, as it reports them, until `closing` is set."""
    queue: asyncio.Queue[Changed] = asyncio.Queue(maxsize=_BACKLOG)

    def listener(kind: str) -> Listener:
        async def listen(ids: list[str]) -> None:
            changed: Changed = {"nodes": [], "pools": [], kind: ids}
            if queue.full():
                older = queue.get_nowait()
                changed = {k: sorted({*older[k], *changed[k]}) for k in changed}
            queue.put_nowait(changed)

        return listen

    unsubscribe = (compute.feed.subscribe(listener("nodes")), compute.feed.subscribe_pools(listener("pools")))
    ended = asyncio.ensure_future(closing.wait())
    got: asyncio.Future[Changed] | None = None
    try:
        while True:
            got = asyncio.ensure_future(queue.get())
            await asyncio.wait((got, ended), return_when=asyncio.FIRST_COMPLETED)
            if not got.done():
                return
            mine = await _mine(compute, tenant_id, got.result())
            if mine["nodes"] or mine["pools"]:
                yield mine
    finally:
        for stop in unsubscribe:
            stop()
        for waiting in (got, ended):
            if waiting is not None:
                waiting.cancel()
