"""The Engine: claims due work items, runs their reconcilers, applies the outcome.

Each run is load, process, apply:

    load     `queue.claim` leases a batch of due items in one statement
    process  the reconciler runs with no transaction open (`Reconciler.run`)
    apply    `decide` (pure) picks the next due time, `queue.complete` writes it
             under the lease token; a stale token drops the result

While runs are alive the engine renews their leases every third of a lease, all in one
statement, on the database's clock (see `store.clock`); a reconciler calls `ctx.fence()` right before each
write outside the database, which raises LeaseLost once the lease is gone, and
`ctx.guard(session)` inside each domain write's transaction, so a run that outlived its
lease (a stalled process) never writes beside the worker that took the item over.

`serve()` keeps doing that until cancelled: its claim loop and every run are named,
guarded tasks in one TaskGroup. When every slot is busy the claim loop waits for a run
to end (or a wake), never polling the database for work it could not take; when its
poll runs out with nothing woken it reads when the next item is claimable (one
statement, `queue.upcoming`) before it claims, so an idle engine sends one read a poll.
`run_once()` and `run_until_idle()` drive the same steps by hand for tests, the demo
and the benchmarks on the simulated clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core import tracing
from better_compute.core.clock import Clock, Elapsed, SimClock, within
from better_compute.core.errors import ComputeError
from better_compute.core.ids import new_id
from better_compute.engine import metrics, queue
from better_compute.engine.compaction import Compaction, compact_forever
from better_compute.engine.decide import Completion, Result, decide, retry_delay
from better_compute.engine.notify import listen_for_work
from better_compute.engine.outcome import LeaseLost, Outcome, TemporaryError
from better_compute.engine.queue import Claim
from better_compute.engine.tasks import guarded
from better_compute.store import Database
from better_compute.store.clock import DatabaseClock, SharedClock, database_clock

__all__ = ["Engine", "Reconciler", "RunContext"]

log = logging.getLogger("better_compute.engine")

T = TypeVar("T")

_SETTLE_STEPS = 8
_MAX_IDLE_STEPS = 10_000


class RunContext:
    """What a reconciler gets for one run: the store, the clock, the item, its attempt."""

    def __init__(self, engine: Engine, held: Claim) -> None:
        self.db: Database = engine.db
        self.clock: Clock = engine.clock
        self.kind = held.kind
        self.key = held.key
        self.attempt = held.attempts + 1
        self._engine = engine
        self._held = held
        self.lost = False
        """Set once a renewal found the lease gone: the run's result will be dropped."""
        self._renewed: tuple[datetime, float] | None = None
        """When the latest renewal of this lease that succeeded was sent: on the clock, and monotonic."""

    def retry_at(self, error: TemporaryError) -> datetime:
        """When the engine runs this item again if the run raises `error`: the one computation
        (`decide.retry_delay` at this item's failure count), so a row that shows the next attempt
        shows the engine's own and no reconciler works a delay out for itself."""
        return self.clock.now() + timedelta(seconds=retry_delay(error, self.attempt))

    async def fence(self) -> None:
        """Raise LeaseLost unless this run holds its lease for at least two thirds of a term from now.

        Call it right before each write the token fence cannot guard (a provider or a
        cluster call): once the lease has expired on the database's clock, another worker
        may be running this item, and this run must not write. A renewal of this lease
        that succeeded less than a third of a lease ago stands, so a run's fenced writes
        in a row cost one renewal, not one each.
        """
        if self.lost:
            raise LeaseLost(f"lease on {self.kind}/{self.key} was lost")
        if self._renewed_lately():
            return
        sent = _stamp(self.clock)
        renewed = await queue.extend(
            self.db, [self._held], lease_seconds=self._engine.lease_seconds, lease_clock=self._engine.lease_clock
        )
        if self._held.id not in renewed:
            self.lost = True
            raise LeaseLost(f"lease on {self.kind}/{self.key} expired or passed to another worker")
        self._was_renewed(sent)

    async def guard(self, session: AsyncSession) -> None:
        """Raise LeaseLost unless this run still holds its lease, read in `session`'s transaction.

        Call it in every domain write's transaction, after locking the rows it writes and before
        writing them: a run whose lease is gone writes nothing, and the transaction rolls back. A
        worker that took the item over after the check waits for those rows until this commits.
        """
        if self.lost:
            raise LeaseLost(f"lease on {self.kind}/{self.key} was lost")
        if not await queue.holds(session, self._held, lease_clock=self._engine.lease_clock):
            self.lost = True
            raise LeaseLost(f"lease on {self.kind}/{self.key} expired or passed to another worker")

    async def heartbeat(self) -> None:
        """Hold the lease as `fence()` does (the engine also renews it on its own while the run is alive)."""
        await self.fence()

    def _was_renewed(self, sent: tuple[datetime, float]) -> None:
        if self._renewed is None or self._renewed[1] < sent[1]:
            self._renewed = sent

    def _renewed_lately(self) -> bool:
        """A renewal sent less than a third of a lease ago succeeded, by the clock and by the monotonic clock.

        A renewal sets the expiry a full lease after the database's time, which is no earlier
        than when it was sent; so at least two thirds of a lease are left. Both clocks must
        agree: the injected one sees a simulated jump or a process stopped past its lease
        (a monotonic clock does not count a suspended machine), the monotonic one a wall
        clock set back.
        """
        if self._renewed is None:
            return False
        at, monotonic = self._renewed
        window = self._engine.lease_seconds / 3
        return 0 <= (self.clock.now() - at).total_seconds() < window and 0 <= time.monotonic() - monotonic < window


class Reconciler(Protocol):
    """Brings one kind of object to its desired state; every run is idempotent."""

    kind: str

    async def run(self, ctx: RunContext, key: str) -> Outcome: ...


class Engine:
    """Leased, token-fenced execution of work items; any number of replicas on PostgreSQL."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        reconcilers: Sequence[Reconciler],
        *,
        owner: str | None = None,
        lease_seconds: float = 60.0,
        batch_size: int = 500,
        concurrency: int = 64,
        poll_seconds: float = 1.0,
        lease_clock: DatabaseClock | None = None,
    ) -> None:
        if lease_seconds <= 0 or batch_size < 1 or concurrency < 1 or poll_seconds <= 0:
            raise ValueError("lease, batch size, concurrency and poll interval must be positive")
        self.db = db
        self.clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{new_id('engine')[-8:]}"
        self.lease_seconds = lease_seconds
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.lease_clock = lease_clock or database_clock(clock)
        """Writes and judges leases: the database's clock, the same for every replica."""
        self._leases_on_this_clock = isinstance(self.lease_clock, SharedClock) and self.lease_clock.clock is clock
        """Leases are judged on `clock` itself (a simulated world's): the queue's next due time covers their expiry."""
        self.stale = 0
        self._reconcilers: dict[str, Reconciler] = {}
        self._wake = asyncio.Event()
        self._running = 0
        self._live: dict[str, RunContext] = {}
        self._run_started = asyncio.Event()
        self._compactions: list[Compaction] = []
        for reconciler in reconcilers:
            self.register(reconciler)

    def register(self, reconciler: Reconciler) -> None:
        """Add a reconciler; one per kind."""
        if reconciler.kind in self._reconcilers:
            raise ValueError(f"a reconciler for kind {reconciler.kind!r} is registered already")
        self._reconcilers[reconciler.kind] = reconciler

    def compact_also(self, what: str, compaction: Callable[[datetime], Awaitable[int]]) -> None:
        """Run `compaction(now)` on the engine's compaction schedule too (see engine.compaction)."""
        self._compactions.append((what, compaction))

    @property
    def kinds(self) -> list[str]:
        return sorted(self._reconcilers)

    def wake(self) -> None:
        """Something became due now: look for work at once instead of at the next poll."""
        self._wake.set()

    async def submit(self, kind: str, key: str, *, due: datetime | None = None) -> None:
        """Enqueue (kind, key) in a transaction of its own, then wake the engine."""
        async with self.db.transaction() as session:
            await queue.enqueue(session, kind=kind, key=key, now=self.clock.now(), due=due)
        self.wake()

    async def run_once(self) -> int:
        """Claim up to `batch_size` due items, run them concurrently, apply; returns how many ran."""
        claims = await self._claim(self.batch_size)
        if claims:
            renewer = asyncio.ensure_future(self._keep_leases())
            try:
                completions = await asyncio.gather(*(self._process(held) for held in claims))
            finally:
                renewer.cancel()
                await asyncio.gather(renewer, return_exceptions=True)
            await self._apply(list(zip(claims, completions, strict=True)))
        return len(claims)

    async def run_until_idle(self, *, until: datetime | None = None, max_runs: int = 100_000) -> int:
        """Run due items until none is due; with `until`, move the SimClock through each next event up to it.

        The next event is the earliest of: an item's due time, an abandoned lease's
        expiry, a SimClock sleeper's deadline (an emulator's provisioning timer). A
        reconciler must requeue rather than sleep on the clock: nothing advances the
        clock while a run is in progress.

        With `until`, the queue's next due time (one read) says whether to claim: a claim is
        a write transaction, and most moves of the clock (a sleeper's deadline) make nothing
        due. Where leases are judged on another clock than this one, that read cannot say
        whether a lease has expired, so every look claims, as without `until`.
        """
        if until is not None and not isinstance(self.clock, SimClock):
            raise TypeError("run_until_idle(until=...) needs a SimClock")
        total = 0
        idle_steps = 0
        claim = until is None or not self._leases_on_this_clock
        while True:
            if claim:
                ran = await self.run_once()
                total += ran
                if total > max_runs:
                    raise RuntimeError(
                        f"more than {max_runs} runs without going idle; does a reconciler requeue forever?"
                    )
                if ran:
                    idle_steps = 0
                    continue
            if until is None or not isinstance(self.clock, SimClock):
                return total
            if not claim:
                await self._writers_before_this()
            now = self.clock.now()
            queued = await queue.next_due(self.db, kinds=self.kinds)
            if not claim and queued is not None and queued <= now:
                claim = True  # due and not claimed since (a woken task queued it): claim before moving on
                continue
            target = min((t for t in (queued, self.clock.next_wakeup()) if t is not None), default=None)
            if target is None or target > until:
                if now >= until:
                    return total
                target = until
            # Only a step that cannot move the clock (an item due now that nobody claims) counts towards
            # giving up: a large fleet has many more sleepers' deadlines than that between runs.
            idle_steps = idle_steps + 1 if target <= now else 0
            if idle_steps > _MAX_IDLE_STEPS:
                raise RuntimeError("the simulated clock stopped making progress")
            self.clock.advance_to(max(target, now))
            await _settle()
            claim = not self._leases_on_this_clock

    async def _writers_before_this(self) -> None:
        """On SQLite, wait until this process's write transactions queued before now have ended.

        A claim waits for them (its write transaction takes its turn after theirs), so work that a
        task woken by the clock is queueing is due by the time the claim looks; the read that
        stands in for the claim waits the same way. (On PostgreSQL a claim waits for no one.)"""
        turns = self.db.write_turns
        if turns is not None:
            async with turns.turn():
                pass

    async def serve(self) -> None:
        """Claim and run work until cancelled; several processes may serve one PostgreSQL."""
        log.info("engine %s serving kinds %s", self.owner, ", ".join(self.kinds) or "(none)")
        finished: asyncio.Queue[tuple[Claim, Completion | None]] = asyncio.Queue()
        try:
            async with asyncio.TaskGroup() as group:
                guarded(group, f"engine-apply:{self.owner}", self._apply_loop(finished))
                guarded(group, f"engine-leases:{self.owner}", self._keep_leases())
                guarded(group, f"engine-claims:{self.owner}", self._claim_loop(group, finished))
                guarded(
                    group, f"engine-compact:{self.owner}", compact_forever(self.db, self.clock, also=self._compactions)
                )
                if self.db.is_postgres:
                    wakes = listen_for_work(self.db, self.wake, sleep=self.clock.sleep, retry_seconds=self.poll_seconds)
                    guarded(group, f"engine-listen:{self.owner}", wakes)
        finally:
            await self._hand_back(finished)

    async def _hand_back(self, finished: asyncio.Queue[tuple[Claim, Completion | None]]) -> None:
        """On the way out: apply finished runs, and release the leases of interrupted ones at once.

        Without this a replica that stops would leave its items leased until the lease
        expired; with it another replica takes them over immediately.
        """
        pending = [finished.get_nowait() for _ in range(finished.qsize())]
        try:
            await self._apply(pending)
            released = await queue.release(self.db, owner=self.owner, now=self.clock.now())
        except Exception:
            log.exception("engine %s could not hand back its leases; they expire on their own", self.owner)
            return
        if released:
            log.info("engine %s handed back %d interrupted items", self.owner, released)

    async def _claim_loop(
        self, group: asyncio.TaskGroup, finished: asyncio.Queue[tuple[Claim, Completion | None]]
    ) -> None:
        came_up_empty = False
        look_first = False
        while True:
            self._wake.clear()
            free = self.concurrency - self._running
            if free <= 0:
                await self._wake.wait()  # every slot is busy: a finishing run (or a write) wakes us
                continue
            if look_first:
                # A poll ran out and nothing woke us: a read says whether anything is claimable
                # yet, where a claim would take the write lock to find nothing.
                seconds = await self._idle_seconds()
                if seconds > 0:
                    await self._idle(seconds)
                    look_first = not self._wake.is_set()
                    continue
            look_first = False
            try:
                claims = await _uninterrupted(self._claim(min(free, self.batch_size)))
            except Exception:
                log.exception("engine %s could not claim work; retrying in %ss", self.owner, self.poll_seconds)
                await self._idle(self.poll_seconds)
                continue
            for held in claims:
                self._running += 1
                guarded(group, f"reconcile:{held.kind}/{held.key}", self._run_in_slot(held, finished))
            if claims:
                came_up_empty = False
                await asyncio.sleep(0)
                continue
            seconds = await self._idle_seconds()
            if seconds <= 0 and came_up_empty:
                # Due, yet not ours to claim twice running (another replica's claim holds its rows).
                seconds = self.poll_seconds
            came_up_empty = True
            await self._idle(seconds)
            look_first = not self._wake.is_set()

    async def _run_in_slot(self, held: Claim, finished: asyncio.Queue[tuple[Claim, Completion | None]]) -> None:
        try:
            finished.put_nowait((held, await self._process(held)))
        finally:
            self._running -= 1
            self.wake()

    async def _apply_loop(self, finished: asyncio.Queue[tuple[Claim, Completion | None]]) -> None:
        """Apply completions as they come, all that are waiting in one transaction."""
        while True:
            batch = [await finished.get()]
            while not finished.empty() and len(batch) < self.batch_size:
                batch.append(finished.get_nowait())
            try:
                await _uninterrupted(self._apply(batch))
            except Exception:
                # Nothing was written: the leases expire and the items run again.
                log.exception("engine %s could not apply %d completions", self.owner, len(batch))

    async def _idle_seconds(self) -> float:
        """Seconds until an item is claimable (0: one is now), at most the poll."""
        try:
            soon = await queue.upcoming(self.db, kinds=self.kinds, lease_clock=self.lease_clock)
        except Exception:
            log.exception("engine %s could not read the next due time", self.owner)
            return self.poll_seconds
        seconds = soon.seconds(self.clock.now())
        return self.poll_seconds if seconds is None else min(self.poll_seconds, seconds)

    async def _idle(self, seconds: float) -> None:
        if self._wake.is_set():
            return
        with contextlib.suppress(Elapsed):
            await within(self.clock, seconds, self._wake.wait())

    async def _claim(self, limit: int) -> list[Claim]:
        return await queue.claim(
            self.db,
            kinds=self.kinds,
            owner=self.owner,
            now=self.clock.now(),
            lease_seconds=self.lease_seconds,
            limit=limit,
            lease_clock=self.lease_clock,
        )

    async def _process(self, held: Claim) -> Completion | None:
        """Run the reconciler with no transaction open; None if the lease was lost mid-run."""
        reconciler = self._reconcilers[held.kind]
        started = time.perf_counter()
        ended: Outcome | Exception
        ctx = self._live[held.id] = RunContext(self, held)
        self._run_started.set()
        attributes: tracing.Attributes = {
            "bc.reconcile.kind": held.kind,
            "bc.reconcile.key": held.key,
            "bc.reconcile.attempt": held.attempts,
        }
        with tracing.span(f"reconcile {held.kind}", attributes) as current:
            try:
                result = await reconciler.run(ctx, held.key)
                ended = result if isinstance(result, Outcome) else TypeError(f"{held.kind} returned {result!r}")
            except Exception as exc:  # LeaseLost included: ctx.lost says so below
                ended = exc
            finally:
                self._live.pop(held.id, None)
            if isinstance(ended, Exception):
                tracing.failed(current, ended)
        if ctx.lost or isinstance(ended, LeaseLost):
            self._count_stale(held)
            return None
        metrics.RECONCILE_DURATION.labels(held.kind).observe(time.perf_counter() - started)
        completion = decide(ended, now=self.clock.now(), attempts=held.attempts)
        if isinstance(ended, Exception):
            metrics.RECONCILE_ERRORS.labels(held.kind, type(ended).__name__).inc()
            _log_failure(held, ended, completion.result, completion.delay, completion.attempts)
        return completion

    async def _keep_leases(self) -> None:
        """Every third of a lease, renew the leases of all live runs in one statement; until cancelled.

        With no run alive it waits for one, so an idle engine has no timer on the clock.
        """
        while True:
            if not self._live:
                self._run_started.clear()
                await self._run_started.wait()
            await self.clock.sleep(self.lease_seconds / 3)
            live = [ctx for ctx in self._live.values() if not ctx.lost]
            sent = _stamp(self.clock)
            try:
                renewed = await _uninterrupted(
                    queue.extend(
                        self.db,
                        [ctx._held for ctx in live],
                        lease_seconds=self.lease_seconds,
                        lease_clock=self.lease_clock,
                    )
                )
            except Exception:  # a database blip: the next renewal may still come in time
                log.exception("engine %s could not renew the leases of %d runs", self.owner, len(live))
                continue
            for ctx in live:
                if ctx._held.id in renewed:
                    ctx._was_renewed(sent)
                else:
                    ctx.lost = True
                    log.warning("%s/%s lost its lease while running; its writes are fenced off", ctx.kind, ctx.key)

    async def _apply(self, processed: Sequence[tuple[Claim, Completion | None]]) -> None:
        """Write completions under their tokens; a stale one is counted and dropped."""
        done = [(held, completion) for held, completion in processed if completion is not None]
        now = self.clock.now()
        applied = await queue.complete(self.db, done, now=now)
        for (held, completion), ok in zip(done, applied, strict=True):
            if not ok:
                self._count_stale(held)
                continue
            metrics.RECONCILE_RUNS.labels(held.kind, completion.result.value).inc()
            if completion.due_at is not None and completion.due_at <= now:
                self.wake()

    def _count_stale(self, held: Claim) -> None:
        self.stale += 1
        metrics.RECONCILE_STALE.labels(held.kind).inc()
        log.warning("dropped the result of %s/%s: its lease passed to another worker", held.kind, held.key)


def _stamp(clock: Clock) -> tuple[datetime, float]:
    """When a renewal is sent, on the injected clock and on the monotonic one."""
    return clock.now(), time.monotonic()


def _log_failure(held: Claim, error: Exception, result: Result, delay: float | None, failures: int) -> None:
    what = f"{held.kind}/{held.key} failed (failure {failures})"
    if result is Result.PERMANENT:
        log.error("%s permanently: %s", what, error)
    else:
        expected = _expected(error)
        log.log(
            logging.WARNING if expected else logging.ERROR,
            "%s; retry in %s: %s",
            what,
            timedelta(seconds=delay or 0),
            error,
            exc_info=None if expected else error,
        )


def _expected(error: Exception) -> bool:
    return isinstance(error, TemporaryError | ComputeError)


async def _uninterrupted(step: Coroutine[Any, Any, T]) -> T:
    """Finish a database step even if the caller is cancelled meanwhile, then re-raise.

    Cancelling a transaction half-way can leave its connection holding a lock (on
    SQLite, the write lock) until it is collected; a claim or an apply is short, so
    it is allowed to end, and the shutdown then hands back whatever it leased.
    """
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


async def _settle() -> None:
    """Let tasks woken by the clock run until they block again."""
    for _ in range(_SETTLE_STEPS):
        await asyncio.sleep(0)
