"""The tenant's share of the change feed, for /ui/events.

The feed (compute.changes.ChangeFeed) calls its listeners after each commit that changed
what Nodes hold (a booking, a release, a cordon); it names Nodes of every tenant. This
keeps the ones of the signed-in tenant, read through ops.nodes as the API would, so a
stream never tells one tenant when another's Nodes changed. Nothing polls: a stream waits
on its queue until the feed fills it, and unsubscribes when the browser goes away or the server
shuts down (uvicorn waits for open responses before the lifespan ends, so a stream must end first).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from better_compute.ops import nodes
from better_compute.server import Compute

__all__ = ["end_streams", "tenant_changes"]

_BACKLOG = 64  # changes waiting for a slow browser; past it, older ones merge into the next


def end_streams(closing: asyncio.Event) -> None:
    """End every stream waiting on `closing` (the server is shutting down: an open tab must not hold it)."""
    closing.set()


async def tenant_changes(compute: Compute, tenant_id: str, closing: asyncio.Event) -> AsyncIterator[list[str]]:
    """Each batch of the tenant's Node ids the feed reports, as it reports them, until `closing` is set."""
    queue: asyncio.Queue[list[str]] = asyncio.Queue(maxsize=_BACKLOG)

    async def listener(node_ids: list[str]) -> None:
        if queue.full():
            node_ids = sorted({*queue.get_nowait(), *node_ids})
        queue.put_nowait(node_ids)

    unsubscribe = compute.feed.subscribe(listener)
    ended = asyncio.ensure_future(closing.wait())
    got: asyncio.Future[list[str]] | None = None
    try:
        while True:
            got = asyncio.ensure_future(queue.get())
            await asyncio.wait((got, ended), return_when=asyncio.FIRST_COMPLETED)
            if not got.done():
                return
            changed = set(got.result())
            mine = {n["id"] for n in await nodes.list_nodes(compute, tenant_id, include_retired=True)}
            if changed & mine:
                yield sorted(changed & mine)
    finally:
        unsubscribe()
        for waiting in (got, ended):
            if waiting is not None:
                waiting.cancel()
