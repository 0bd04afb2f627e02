"""Named, guarded background tasks: each says how it ended in the log.

A guarded task never lets an exception escape into its TaskGroup (which would cancel
its siblings); it logs it instead. Cancellation is the only way to stop one and is
always re-raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["guarded"]

log = logging.getLogger("better_compute.engine")


def guarded(group: asyncio.TaskGroup, name: str, coro: Coroutine[Any, Any, object]) -> asyncio.Task[None]:
    """Start `coro` in `group` under `name`, logging (not raising) its failure."""

    async def run() -> None:
        try:
            await coro
        except asyncio.CancelledError:
            log.debug("task %s cancelled", name)
            raise
        except Exception:
            log.exception("task %s failed", name)
        else:
            log.debug("task %s finished", name)

    return group.create_task(run(), name=name)
