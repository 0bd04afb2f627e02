"""`async with` for everything in the simulated world that starts and stops."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["StartStop"]


class StartStop:
    """Gives a class with `start()` and `stop()` the async context manager protocol."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
