"""`?watch=true` on a list: a stream of `{"type", "object"}` lines.

Without a resourceVersion (or with "0") the stream opens with an ADDED event per
matching object, as the real server does; with one it replays later changes
from the store's history (410 Expired when that history no longer reaches
back so far). An object that stops matching the selectors leaves
the stream with a DELETED event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import StreamingResponse

from better_compute.testing.kube.resources import ResourceType
from better_compute.testing.kube.selectors import match_fields, match_labels, parse_field_selector, parse_label_selector
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import Change, ObjectStore

__all__ = ["watch_response"]


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


def watch_response(
    store: ObjectStore,
    rt: ResourceType,
    namespace: str | None,
    current: list[dict[str, Any]],
    query: Mapping[str, str],
    stopping: asyncio.Event,
) -> StreamingResponse:
    labels = parse_label_selector(query["labelSelector"]) if query.get("labelSelector") else []
    fields = parse_field_selector(query["fieldSelector"], rt) if query.get("fieldSelector") else []
    since = query.get("resourceVersion") or "0"
    if not since.isdigit():
        raise KubeError.bad_request(f"invalid resourceVersion {since!r}")

    def relevant(change: Change) -> bool:
        ns = change.object["metadata"].get("namespace", "")
        return change.resource.key == rt.key and (namespace is None or ns == namespace)  # any version of the kind

    def matches(obj: dict[str, Any]) -> bool:
        return match_labels(labels, obj) and match_fields(fields, rt, obj)

    queue: asyncio.Queue[Change] = asyncio.Queue()
    unsubscribe = store.subscribe(lambda change: queue.put_nowait(change) if relevant(change) else None)

    def key(obj: dict[str, Any]) -> tuple[str, str]:
        return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    if since == "0":
        backlog = [Change("ADDED", rt, obj, int(obj["metadata"]["resourceVersion"])) for obj in current]
        visible: set[tuple[str, str]] = set()
    else:
        oldest = store.history[0].revision if store.history else store.revision + 1
        if int(since) < oldest - 1 and int(since) < store.revision:
            raise KubeError(410, "Expired", f"too old resource version: {since} ({oldest - 1})")
        backlog = [c for c in store.history if c.revision > int(since) and relevant(c)]
        # what the client saw at `since`: today's matches, with later additions undone and deletions restored
        visible = {key(o) for o in current}
        for change in reversed(backlog):
            if change.type == "ADDED":
                visible.discard(key(change.object))
            elif change.type == "DELETED" and matches(change.object):
                visible.add(key(change.object))

    async def stream() -> AsyncIterator[bytes]:
        try:
            for change in backlog:
                line = _event(change)
                if line:
                    yield line
            while not stopping.is_set():
                getter = asyncio.ensure_future(queue.get())
                stopper = asyncio.ensure_future(stopping.wait())
                try:
                    await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    getter.cancel()
                    stopper.cancel()
                if getter.done() and not getter.cancelled():
                    line = _event(getter.result())
                    if line:
                        yield line
        finally:
            unsubscribe()

    def _event(change: Change) -> bytes | None:
        name = key(change.object)
        if change.type == "DELETED":
            if name in visible or matches(change.object):
                visible.discard(name)
                return _line("DELETED", change.object)
            return None
        if matches(change.object):
            kind = "MODIFIED" if name in visible else "ADDED"
            visible.add(name)
            return _line(kind, change.object)
        if name in visible:
            visible.discard(name)
            return _line("DELETED", change.object)
        return None

    return StreamingResponse(stream(), media_type="application/json")
