"""The GKE emulator's long-running operations: each mutating call's Operation, the work it runs once the clock
has moved, what is busy meanwhile, and `settle`, which tests call after advancing the clock."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Awaitable, Callable

from better_compute.testing.gke.catalog import REGION_ZONES
from better_compute.testing.gke.errors import GkeApiError
from better_compute.testing.gke.registry import GkeRegistry
from better_compute.testing.gke.state import API, ClusterRecord, OperationRecord

__all__ = ["LongRunningOperations", "location_segment", "project_number"]


def project_number(project: str) -> str:
    return str(int(hashlib.sha256(project.encode()).hexdigest()[:10], 16))


def location_segment(location: str) -> str:
    """selfLinks name a zonal cluster's location `zones/<zone>` and a regional one `locations/<region>`."""
    return f"locations/{location}" if location in REGION_ZONES else f"zones/{location}"


class LongRunningOperations(GkeRegistry):
    """container Operations: PENDING, RUNNING while the clock runs, DONE (with `error` when the work failed)."""

    def new_operation(self, project: str, location: str, kind: str, target: str) -> OperationRecord:
        name = f"operation-{int(self.clock.now().timestamp() * 1000)}-{secrets.token_hex(4)}"
        segment = f"projects/{project_number(project)}/{location_segment(location)}"
        op = OperationRecord(
            name=name,
            project=project,
            location=location,
            operation_type=kind,
            target_link=f"{API}/{segment}/{target}",
            self_link=f"{API}/{segment}/operations/{name}",
            started_at=self.clock.now(),
        )
        self.operations[name] = op
        return op

    def run_operation(
        self,
        op: OperationRecord,
        seconds: float,
        work: Callable[[], Awaitable[None]],
        busy: str,
        cluster: ClusterRecord,
    ) -> None:
        """Run `work` after `seconds` of the clock as operation `op`; `busy` is held until it ends."""
        self._busy[busy] = op.name

        async def run() -> None:
            try:
                await asyncio.sleep(0)
                op.status = "RUNNING"
                await self.clock.sleep(seconds)
                self._working.add(task)
                try:
                    await work()
                except GkeApiError as exc:
                    op.error = exc.rpc_status()
                except Exception as exc:  # the emulator's own fault: Google reports an INTERNAL error
                    op.error = {"code": 13, "message": f"Internal error: {type(exc).__name__}: {exc}"}
            finally:
                self._working.discard(task)
                if self._busy.get(busy) == op.name:
                    del self._busy[busy]
            op.status = "DONE"
            op.ended_at = self.clock.now()

        task = asyncio.create_task(run(), name=f"gke:{op.operation_type}:{op.name}")
        self._tasks.add(task)
        self._running[task] = (op, cluster.path)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: self._running.pop(done, None))

    async def settle(self) -> None:
        """Let every operation that the clock has made due finish its work (tests call it after advancing)."""
        for _ in range(5):
            await asyncio.sleep(0)
        while self._working:
            await asyncio.wait(set(self._working))
            for _ in range(5):
                await asyncio.sleep(0)

    def _abort_operations(self, cluster: ClusterRecord) -> None:
        """A cluster being deleted ends its other operations, each with an error."""
        for task, (op, path) in list(self._running.items()):
            if path == cluster.path:
                task.cancel()
                op.status = "DONE"
                op.ended_at = self.clock.now()
                op.error = {"code": 1, "message": f"Operation {op.name} was cancelled: the cluster is being deleted."}

    def refuse_if_busy(self, key: str) -> None:
        running = self._busy.get(key)
        if running is not None:
            raise GkeApiError(
                "FAILED_PRECONDITION",
                f"Cluster is running incompatible operation {running}. Please wait and try again once it is done.",
            )

    def run_later(self, seconds: float, work: Callable[[], Awaitable[None]], name: str) -> None:
        """Run `work` once `seconds` of the clock have passed (`settle` waits for it once due)."""

        async def run() -> None:
            await self.clock.sleep(seconds)
            self._working.add(task)
            try:
                await work()
            finally:
                self._working.discard(task)

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
