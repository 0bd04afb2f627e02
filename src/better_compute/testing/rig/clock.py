"""The simulated clock across processes: the world publishes its SimClock, a control plane follows it.

The split rig (testing/rig/world.py) runs the simulated world in one process and the
control plane as a `better-compute serve` process of its own. Both must read the same
simulated time, and the world must know when the control plane has seen each move:

    world    ClockPublisher(clock) listens on 127.0.0.1; every move of `clock` is sent to
             every follower as one line (its ISO time), coalesced to one line per turn of
             the event loop; `await publisher.synced()` waits until each has answered it.
    serve    FollowedClock(address) is a SimClock that reads the world's time once when
             made, then follows it from whichever event loop first sleeps on it (`better-compute
             serve` makes its Compute in one loop and serves in another): each line moves it,
             wakes its due sleepers, and is answered with the same line once they ran.

Test and benchmark code only: the product's clock is `SystemClock`, and nothing here is
reachable from `better-compute serve` unless `--app` names a Compute built on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
from datetime import datetime

from better_compute.core.clock import SimClock
from better_compute.testing.lifecycle import StartStop

__all__ = ["ClockPublisher", "FollowedClock"]

_log = logging.getLogger(__name__)


class _Follower:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.at: datetime | None = None
        self.answered = asyncio.Event()


class ClockPublisher(StartStop):
    """See the module docstring; `address` is `host:port` once started."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.address = ""
        self._followers: list[_Follower] = []
        self._clients: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._unfollow: object = None
        self._queued = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        self._unfollow = self.clock.on_advance(self._moved)

    async def stop(self) -> None:
        if callable(self._unfollow):
            self._unfollow()
            self._unfollow = None
        if self._server is not None:
            self._server.close()
            self._server = None
        for follower in list(self._followers):
            follower.writer.close()
        await asyncio.gather(*self._clients, return_exceptions=True)

    @property
    def followers(self) -> int:
        return len(self._followers)

    async def synced(self, timeout: float = 60.0) -> bool:  # noqa: ASYNC109 a bool, not an exception, once it passes
        """True once every follower has answered the clock's current time (False after `timeout` seconds)."""
        now = self.clock.now()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for follower in list(self._followers):
            while (follower.at is None or follower.at < now) and follower in self._followers:
                follower.answered.clear()
                left = deadline - loop.time()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follower.answered.wait(), left)
        return True

    def _moved(self, _now: datetime) -> None:
        if not self._queued:
            self._queued = True
            asyncio.get_running_loop().call_soon(self._send)

    def _send(self) -> None:
        self._queued = False
        line = self.clock.now().isoformat().encode() + b"\n"
        for follower in self._followers:
            if not follower.writer.is_closing():
                follower.writer.write(line)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
            task.add_done_callback(self._clients.discard)
        follower = _Follower(writer)
        self._followers.append(follower)
        writer.write(self.clock.now().isoformat().encode() + b"\n")
        try:
            while line := await reader.readline():
                at = datetime.fromisoformat(line.decode().strip())
                follower.at = at if follower.at is None else max(follower.at, at)
                follower.answered.set()
        except ConnectionError:
            pass
        finally:
            self._followers.remove(follower)
            follower.answered.set()
            writer.close()


class FollowedClock(SimClock):
    """A SimClock that follows a `ClockPublisher` at `address` (`host:port`); see the module docstring.

    One connection for the life of the process, read by a thread: each time is applied in the
    event loop that last slept on the clock (its sleepers wake there), or directly while no
    loop is running, and answered once applied.
    """

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._sock = socket.create_connection((host, int(port)), timeout=30)
        self._sock.settimeout(None)
        self._lines = self._sock.makefile("rb")
        first = self._lines.readline()
        super().__init__(datetime.fromisoformat(first.decode().strip()))
        self._sock.sendall(first)  # seen
        self._loop: asyncio.AbstractEventLoop | None = None
        threading.Thread(target=self._follow, name="followed-clock", daemon=True).start()

    def close(self) -> None:
        """Stop following (the clock keeps its time)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # ends the thread's read
        self._sock.close()

    async def sleep(self, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        await super().sleep(seconds)

    def _follow(self) -> None:
        try:
            while line := self._lines.readline():
                when = datetime.fromisoformat(line.decode().strip())
                loop = self._loop
                applied = False
                if loop is not None and not loop.is_closed():
                    with contextlib.suppress(RuntimeError, TimeoutError, concurrent.futures.CancelledError):
                        asyncio.run_coroutine_threadsafe(self._move(when), loop).result(timeout=600)
                        applied = True
                if not applied and when > self._now:
                    self._now = when  # no loop runs: nobody sleeps on it yet
                self._sock.sendall(line)
        except (OSError, ValueError):  # closed here, or the world went away
            pass
        finally:
            self._lines.close()

    async def _move(self, when: datetime) -> None:
        if when > self._now:
            self.advance_to(when)
        for _ in range(3):  # the woken sleepers run (wake, then their task's step) before the answer
            await asyncio.sleep(0)
