"""The node's current assignment, shared by the gateway connection and the device plugin.

The connection writes each assignment the gateway pushes; the device plugin's
ListAndWatch streams wait on `changes()` and send the new device list as soon as the
set of held devices changes. Only devices that are both in the node's inventory and held
by a reservation are advertised; `set_unhealthy` (bcd's health watch) wakes them too, so a
device that turns unhealthy is sent to the kubelet as `Unhealthy` at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from better_compute.wire.protocol import Assignment

__all__ = ["NodeState"]


class NodeState:
    """The latest assignment and the node's own devices, with change notification."""

    def __init__(self, device_ids: Iterable[str]) -> None:
        self._devices = tuple(device_ids)
        self._assignment = Assignment()
        self._version = 0
        self._changed = asyncio.Condition()
        self._unhealthy: frozenset[str] = frozenset()

    @property
    def assignment(self) -> Assignment:
        return self._assignment

    @property
    def version(self) -> int:
        """Bumped each time the set of held devices, or of unhealthy ones, changes."""
        return self._version

    def held(self) -> list[str]:
        """The node's devices that a reservation holds, in inventory order."""
        wanted = self._assignment.held_devices()
        return [device for device in self._devices if device in wanted]

    def unhealthy(self) -> frozenset[str]:
        """The node's devices bcd's health watch found unhealthy."""
        return self._unhealthy

    async def set_unhealthy(self, devices: Iterable[str]) -> bool:
        """Take the health watch's unhealthy devices; returns whether that changed (and wakes watchers if so)."""
        unhealthy = frozenset(devices)
        if unhealthy == self._unhealthy:
            return False
        self._unhealthy = unhealthy
        await self._bump()
        return True

    def reservation_of(self, device_id: str) -> str | None:
        for reservation in self._assignment.reservations:
            if device_id in reservation.devices:
                return reservation.id
        return None

    async def apply(self, assignment: Assignment) -> bool:
        """Take a new assignment; returns whether the held devices changed (and wakes watchers if so)."""
        before = self.held()
        self._assignment = assignment
        if self.held() == before:
            return False
        await self._bump()
        return True

    async def _bump(self) -> None:
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def changes(self) -> AsyncIterator[list[str]]:
        """The held devices now, then again after every change; ends only when cancelled."""
        seen = self._version
        yield self.held()
        while True:
            async with self._changed:
                while self._version == seen:
                    await self._changed.wait()
                seen = self._version
            yield self.held()
