"""bcd for the kubelet simulator's pods, run in worker processes instead of the caller's.

`BcdWorkerRuntime` is `BcdPodRuntime` (testing/bcd_runtime.py) with bcd's two containers
handed to one of K worker processes: the env and files are prepared exactly as there (the
node directories are on the shared filesystem), then a worker runs the real
`bcd.join.join(config, inventory, clock=...)` for the `join` container and the real
`Bcd(config, clock=..., inventory=...).run(device_plugin=False)` for the `run` container,
until the pod's task is cancelled. That is the light stand-in the fleet bench needs for
thousands of Nodes: the real join and the real gateway agent and session (heartbeats,
reconnects, credential renewal), without the device plugin server, whose kubelet
registration socket lives in this process. The control plane's process then holds only
the server ends of the sessions, and bcd's TLS and WebSocket work runs on other cores.

Each worker keeps a SimClock that follows the parent's: every message carries the
parent's time, and each move of the parent's clock is sent to every worker (coalesced to
one message per turn of the event loop). A worker's sleepers wake when the followed time
passes their deadline, as they would on the parent's clock.

The protocol is JSON lines over the worker's stdin (parent to worker: `time`, `join` and
`run`, each with the parent's `now`, and `cancel`) and a copy of its stdout (worker to
parent: `{"ready"}` once, then `{"id", "ok"|"error"}`, and `{"id", "backoff": true|false}`
around each back-off of a join, which leaves `joining` while it sleeps, as in process);
anything bcd prints goes to stderr. At most `joins_at_once` joins are in flight (the rest
wait their turn, not counted in `joining` until they have it). A worker that dies fails every pod it hosted with `BcdWorkerDied`; stopping
the runtime closes the workers' stdin, which cancels their bcd and ends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import resource
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.daemon import Bcd
from better_compute.bcd.inventory import DRIVER_WAIT_SECONDS, read_inventory
from better_compute.bcd.join import join
from better_compute.core.clock import SimClock
from better_compute.testing.bcd_runtime import BcdPodRuntime
from better_compute.testing.kube.runtime import NodeRun, PodRun

__all__ = ["BcdWorkerDied", "BcdWorkerError", "BcdWorkerRuntime"]

_log = logging.getLogger(__name__)
_LINE_LIMIT = 1 << 24
_STOP_SECONDS = 10.0
_CANCEL_SECONDS = 10.0
JOINS_AT_ONCE = 32
"""Joins in flight at most, over all workers. bcd's join times out after 30 s of real time
while the control plane shares one core with everything else, and a join whose answer is lost
has spent a use of the pool's token; more at once only queue longer at the control plane."""


class BcdWorkerError(Exception):
    """bcd failed in a worker; the message is the worker's `Type: message`."""


class BcdWorkerDied(Exception):
    """The worker process hosting a pod's bcd ended before the pod did."""


class _Worker:
    """One worker process and the jobs it hosts."""

    def __init__(
        self, index: int, process: asyncio.subprocess.Process, on_backoff: Callable[[bool], None] = lambda _: None
    ) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._on_backoff = on_backoff
        self._backing_off: set[int] = set()
        self.index = index
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._pending: dict[int, asyncio.Future[None]] = {}
        self._ids = itertools.count()
        self.load = 0
        self.died: str | None = None
        self.stopping = False
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=f"bcd-worker-{index}:read")

    @classmethod
    async def spawn(cls, index: int, now: datetime, on_backoff: Callable[[bool], None]) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            now.isoformat(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_LINE_LIMIT,
        )
        assert process.stdout is not None
        if not await process.stdout.readline():  # its first line says it is ready
            raise RuntimeError(f"bcd worker {index} did not start: it exited with code {await process.wait()}")
        return cls(index, process, on_backoff)

    def send(self, message: dict[str, Any]) -> None:
        if self.died is None and not self._stdin.is_closing():
            self._stdin.write(json.dumps(message).encode() + b"\n")

    async def call(self, op: str, env: dict[str, str], now: datetime) -> None:
        """Run `op` (join or run) in the worker; cancelling this cancels it there."""
        if self.died is not None:
            raise BcdWorkerDied(self.died)
        job = next(self._ids)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending[job] = done
        self.load += 1
        try:
            self.send({"op": op, "id": job, "env": env, "now": now.isoformat()})
            try:
                await done
            except asyncio.CancelledError:
                if self.died is None:
                    # wait for the worker to end it, so its gateway session closes before the caller goes on
                    acked: asyncio.Future[None] = loop.create_future()
                    self._pending[job] = acked
                    self.send({"op": "cancel", "id": job})
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(acked, _CANCEL_SECONDS)
                raise
        finally:
            self._pending.pop(job, None)
            self.load -= 1

    async def _read(self) -> None:
        try:
            while line := await self._stdout.readline():
                reply = json.loads(line)
                if "backoff" in reply:
                    waiting, job = bool(reply["backoff"]), reply["id"]
                    if job in self._pending and waiting != (job in self._backing_off):
                        (self._backing_off.add if waiting else self._backing_off.discard)(job)
                        self._on_backoff(waiting)
                    continue
                waiter = self._pending.get(reply["id"])
                if waiter is None or waiter.done():
                    continue
                if "error" in reply:
                    waiter.set_exception(BcdWorkerError(reply["error"]))
                else:
                    waiter.set_result(None)
        finally:
            for _ in range(len(self._backing_off)):
                self._on_backoff(False)  # the parent's count ends each of its joins
            self._backing_off.clear()
            code = await self.process.wait()
            self.died = f"bcd worker {self.index} (pid {self.process.pid}) exited with code {code}"
            if self._pending and not self.stopping:
                _log.error("%s while hosting %d bcd container(s)", self.died, len(self._pending))
            for waiter in self._pending.values():
                if not waiter.done():
                    waiter.set_exception(BcdWorkerDied(self.died))

    async def stop(self) -> None:
        self.stopping = True
        self._stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), _STOP_SECONDS)
        except TimeoutError:
            _log.error("bcd worker %d (pid %d) did not stop: killed", self.index, self.process.pid)
            self.process.kill()
        await self._reader


class BcdWorkerRuntime(BcdPodRuntime):
    """See the module docstring. `start()` spawns the `processes` workers; `stop()` ends them."""

    def __init__(
        self, clock: SimClock, processes: int, root: Path | None = None, *, joins_at_once: int = JOINS_AT_ONCE
    ) -> None:
        if processes < 1:
            raise ValueError("a BcdWorkerRuntime needs at least one worker process")
        super().__init__(clock, root)
        self._join_slots = asyncio.Semaphore(joins_at_once)
        self.sim_clock = clock
        self.processes = processes
        self.workers: list[_Worker] = []
        self._unfollow: Any = None
        self._time_queued = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        now = self.sim_clock.now()
        spawned = await asyncio.gather(
            *(_Worker.spawn(i, now, self._backing_off) for i in range(self.processes)), return_exceptions=True
        )
        self.workers = [w for w in spawned if isinstance(w, _Worker)]
        failed = [e for e in spawned if isinstance(e, BaseException)]
        if failed:
            await self.stop()
            raise failed[0]
        self._unfollow = self.sim_clock.on_advance(self._moved)

    async def stop(self) -> None:
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        workers, self.workers = self.workers, []
        await asyncio.gather(*(w.stop() for w in workers))

    def _backing_off(self, waiting: bool) -> None:
        """A join in a worker sleeps out a back-off (True) or wakes from it: it leaves `joining` meanwhile."""
        self.joining += -1 if waiting else 1

    def _moved(self, _now: datetime) -> None:
        if not self._time_queued and self._loop is not None:
            self._time_queued = True
            self._loop.call_soon_threadsafe(self._send_time)

    def _send_time(self) -> None:
        self._time_queued = False
        message = {"op": "time", "now": self.sim_clock.now().isoformat()}
        for worker in self.workers:
            worker.send(message)

    async def __call__(self, run: PodRun, node: NodeRun) -> None:
        args = run.container.args[:1]
        if args not in (("join",), ("run",)):
            await asyncio.Event().wait()  # an ordinary container: it runs until its pod goes
            return
        if not self.workers:
            raise RuntimeError("BcdWorkerRuntime is not started")
        while node.gpus is not None and not node.gpus.driver_ready:
            # bcd's join waits for the GPUs as in-process (bcd.inventory.await_inventory); a worker reads
            # BCD_SIMULATED_GPUS once, so the wait for the node's driver happens here
            await self.sim_clock.sleep(DRIVER_WAIT_SECONDS)
        env = self._env(run, node)
        if args == ("join",):
            self.joins += 1
            # counted once it holds a slot: the slots' holders may all be asleep in their back-offs,
            # and only the clock moving frees one
            async with self._join_slots:
                self.joining += 1
                try:
                    await self._worker().call("join", env, self.sim_clock.now())
                finally:
                    self.joining -= 1
            self.joined.add(node.name)
            return
        self.runs += 1
        await self._worker().call("run", env, self.sim_clock.now())

    def _worker(self) -> _Worker:
        return min(self.workers, key=lambda w: (w.died is not None, w.load))


# -- the worker process ---------------------------------------------------------------------


class _ReportedBackOff:
    """The worker's clock as a join sees it: each of its sleeps (a back-off) is told to the parent,
    which leaves it out of `joining` meanwhile, as `BcdPodRuntime` does in process."""

    def __init__(self, clock: SimClock, report: Callable[[bool], None]) -> None:
        self._clock = clock
        self._report = report

    def now(self) -> datetime:
        return self._clock.now()

    async def sleep(self, seconds: float) -> None:
        self._report(True)
        try:
            await self._clock.sleep(seconds)
        finally:
            self._report(False)


async def _job(op: str, env: dict[str, str], clock: SimClock, report: Callable[[bool], None]) -> None:
    config = BcdConfig.from_env(env)
    inventory = read_inventory(env)
    if op == "join":
        await join(config, inventory, clock=_ReportedBackOff(clock, report))
    else:
        await Bcd(config, clock=clock, inventory=inventory).run(device_plugin=False)


async def _serve(start: datetime) -> None:
    loop = asyncio.get_running_loop()
    clock = SimClock(start)
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything printed goes to stderr, not into the replies
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, replies)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    writer.write(json.dumps({"ready": os.getpid()}).encode() + b"\n")
    jobs: dict[int, asyncio.Task[None]] = {}

    def finished(job: int, task: asyncio.Task[None]) -> None:
        jobs.pop(job, None)
        reply: dict[str, Any] = {"id": job}
        if task.cancelled():
            reply["ok"] = "cancelled"
        elif (exc := task.exception()) is not None:
            reply["error"] = f"{type(exc).__name__}: {exc}"
        else:
            reply["ok"] = True
        if not writer.is_closing():
            writer.write(json.dumps(reply).encode() + b"\n")

    def backing_off(job: int, waiting: bool) -> None:
        if not writer.is_closing():
            writer.write(json.dumps({"id": job, "backoff": waiting}).encode() + b"\n")

    while line := await reader.readline():
        message = json.loads(line)
        if "now" in message and (now := datetime.fromisoformat(message["now"])) > clock.now():
            clock.advance_to(now)
        op = message["op"]
        if op == "cancel":
            task = jobs.get(message["id"])
            if task is not None:
                task.cancel()
        elif op in ("join", "run"):
            job = int(message["id"])
            report = functools.partial(backing_off, job)
            task = loop.create_task(_job(op, message["env"], clock, report), name=f"bcd:{op}:{job}")
            jobs[job] = task
            task.add_done_callback(functools.partial(finished, job))
    for task in list(jobs.values()):
        task.cancel()
    await asyncio.gather(*jobs.values(), return_exceptions=True)
    writer.close()


def _main() -> None:
    logging.basicConfig(level=logging.WARNING, format=f"bcd worker {os.getpid()}: %(levelname)s %(name)s: %(message)s")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with contextlib.suppress(ValueError, OSError):  # a worker holds thousands of sessions: take all it may
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_serve(datetime.fromisoformat(sys.argv[1])))


if __name__ == "__main__":
    _main()
