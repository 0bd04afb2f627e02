"""A split rig: the simulated world here, the control plane as a real `better-compute serve` process.

    async with SplitRig(database_url, bcd_processes=2) as rig:
        refs = [await rig.secret(token) for token in tokens]      # DOKS tokens, sealed for the tenant
        await rig.apply(document)                                 # POST /v1/fleet/apply, over TLS
        await rig.step_until(rig.clock.now() + timedelta(minutes=5))

This process holds the `Cloud` (the GKE, EKS and DOKS emulators, the Kubernetes API
emulator and its kubelet simulators) and publishes its SimClock (testing/rig/clock.py).
`better-compute serve --app better_compute.testing.rig.serve_app:compute` runs the
control plane in a process of its own (HTTP API, gateway over TLS with a pinned key,
engine workers) on a `FollowedClock`. bcd's real join and gateway agent run in the
Cloud's worker processes (testing/bcd_workers.py), which follow this clock too.

With `replicas=N` (PostgreSQL), N serve processes share the database, as replicas of one
deployment do: each has a port of its own (the rig reads each one's `/metrics`), and bcd's
agent names the first one's, the one URL a deployment's load balancer would be, so every
bcd joins and holds its session there while the engine work is shared through the
database (`FOR UPDATE SKIP LOCKED` claims, LISTEN/NOTIFY wake-ups). The others sweep the
first one's sessions only after SWEEP_MISSED_HEARTBEATS (serve_app.py says why).

The rig drives time as `Engine.run_until_idle` does in one process: it waits until the
control plane is quiet at the current time (every follower has seen it; no work item
due or leased in the database; no bcd join under way and every joined Node's session
connected), then moves the clock to the next event (the earliest due item, an
emulator's timer) at most `step` seconds on. The database is read here only to know
that; every decision is the serve process's. Test and benchmark code only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import trustme
from sqlalchemy import func, select, update

from better_compute.bcd.pins import spki_pin
from better_compute.engine.models import WorkItem
from better_compute.gateway.handshakes import MAX_UNAUTHENTICATED
from better_compute.gateway.join_limit import MAX_JOINS_IN_FLIGHT
from better_compute.gateway.tables import NodeSessionRow
from better_compute.server import better_compute
from better_compute.store.sqlite_lock import SHARED_ENV
from better_compute.testing.cloud import Cloud
from better_compute.testing.rig.clock import ClockPublisher
from better_compute.testing.rig.serve_app import RIG_FILE, RIG_REPLICA

__all__ = ["SplitRig", "cpu_seconds", "open_files", "rss_kib"]

SECRET = "split-rig-server-secret-0123456789abcdef"
_APP = "better_compute.testing.rig.serve_app:compute"
_SERVE = "import sys; from better_compute.cli.main import main; sys.exit(main())"
_TICK = os.sysconf("SC_CLK_TCK")
SWEEP_MISSED_HEARTBEATS = 30
"""Heartbeats a replica other than the first lets pass before it sweeps a session (serve_app._sweep)."""
ENGINE_POLL_SECONDS = 1.0
"""The serve engine's poll (Engine's default `poll_seconds`), on its clock."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def open_files(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _answering(serve: asyncio.subprocess.Process, http: httpx.AsyncClient) -> None:
    """Wait until a serve process answers /healthz (at most 120 s)."""
    deadline = time.perf_counter() + 120
    while True:
        if serve.returncode is not None:
            raise RuntimeError(f"better-compute serve exited with code {serve.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if (await http.get("/healthz")).status_code == 200:
                return
        if time.perf_counter() > deadline:
            raise RuntimeError("better-compute serve did not answer /healthz within 120 s")
        await asyncio.sleep(0.1)


@contextlib.contextmanager
def _unlocked_sqlite() -> Iterator[None]:
    """A Database made inside takes no SQLite file lock (store/sqlite_lock.py), so serve can take it."""
    was = os.environ.get(SHARED_ENV)
    os.environ[SHARED_ENV] = "1"
    try:
        yield
    finally:
        if was is None:
            del os.environ[SHARED_ENV]
        else:
            os.environ[SHARED_ENV] = was


class SplitRig:
    """See the module docstring. `profile`: a path where the serve process's cProfile stats go
    (`profiling()` starts and stops it)."""

    def __init__(
        self,
        database: str,
        *,
        bcd_processes: int = 1,
        max_joins_in_flight: int = MAX_JOINS_IN_FLIGHT,
        step: float = 5.0,
        hold: float = 120.0,
        profile: Path | None = None,
        cprofile: bool = True,
        replicas: int = 1,
    ) -> None:
        if replicas > 1 and not database.startswith("postgresql"):
            raise ValueError("replicas share a PostgreSQL database")
        self.database = database
        self.replicas = max(1, replicas)
        self.cloud = Cloud(bcd_processes=max(1, bcd_processes))
        self.clock = self.cloud.clock
        self.publisher = ClockPublisher(self.clock)
        self.step = step
        self.hold = hold
        self.profile = profile
        self.cprofile = cprofile
        self.max_joins_in_flight = max_joins_in_flight
        with _unlocked_sqlite():
            # this process only reads the queue and writes a few setup rows: the serve process owns the file
            self.setup = better_compute(database=database, secret=SECRET, clock=self.clock)
        self.tenant_id = ""
        self.serves: list[asyncio.subprocess.Process] = []
        self.https: list[httpx.AsyncClient] = []
        """One client a replica, at its own port; the first is `http`."""
        self.url = ""
        self.held_too_long = 0
        """Steps whose wait for a quiet control plane ran past `hold` seconds (the clock then moved on)."""
        self._dir = Path(tempfile.mkdtemp(prefix="split-rig-"))

    async def __aenter__(self) -> SplitRig:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def worker_pids(self) -> list[int]:
        runtime = self.cloud.bcd_workers
        return [w.process.pid for w in runtime.workers] if runtime is not None else []

    async def start(self) -> None:
        await self.cloud.start()
        await self.publisher.start()
        tenant = await self.setup.iam.create_tenant("rig")
        self.tenant_id = tenant.id
        _, key = await self.setup.iam.create_api_key(tenant.id)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        pem = self._dir / "serve.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
        ca_pem = ca.cert_pem.bytes().decode()
        ports = [_free_port() for _ in range(self.replicas)]
        self.url = f"https://127.0.0.1:{ports[0]}"
        rig_file = self._dir / "rig.json"
        rig_file.write_text(json.dumps(self._rig(ca_pem, spki_pin(cert.cert_chain_pems[0].bytes()))))
        context = ssl.create_default_context(cadata=ca_pem)
        for replica, port in enumerate(ports):
            env = {**os.environ, RIG_FILE: str(rig_file), RIG_REPLICA: str(replica)}
            self.serves.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    _SERVE,
                    "serve",
                    "--app",
                    _APP,
                    "--port",
                    str(port),
                    "--tls-cert-file",
                    str(pem),
                    "--log-level",
                    "WARNING",
                    env=env,
                )
            )
            self.https.append(
                httpx.AsyncClient(
                    base_url=f"https://127.0.0.1:{port}",
                    verify=context,
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=600,
                )
            )
            await _answering(self.serves[-1], self.https[-1])  # one at a time: the first may bring the schema up

    def _rig(self, ca_pem: str, pin: str) -> dict[str, Any]:
        eks = self.cloud.eks
        return {
            "database": self.database,
            "secret": SECRET,
            "clock": self.publisher.address,
            "gke": {"url": self.cloud.gke.url, "refresh_token": self.cloud.gke.google_credentials().refresh_token},
            "eks": {"url": eks.url, "access_key_id": eks.access_key_id, "secret_access_key": eks.secret_access_key},
            "doks": {"url": self.cloud.doks.url},
            "control_plane": {
                "url": self.url,
                "gateway_url": self.url.replace("https://", "wss://"),
                "pin": pin,
                "ca_pem": ca_pem,
                "image": "ghcr.io/better-compute/bcd:dev",
            },
            # every bcd connects from 127.0.0.1: the per-address cap on handshakes is the total cap
            "max_unauthenticated": MAX_UNAUTHENTICATED,
            "max_joins_in_flight": self.max_joins_in_flight,
            "sweep_missed_heartbeats": SWEEP_MISSED_HEARTBEATS,
            "profile": str(self.profile) if self.profile else None,
            "cprofile": self.cprofile,
        }

    async def stop(self) -> None:
        for http in self.https:
            await http.aclose()
        self.https = []
        for serve in self.serves:
            if serve.returncode is None:
                serve.send_signal(signal.SIGINT)
        for serve in self.serves:
            try:
                await asyncio.wait_for(serve.wait(), 60)
            except TimeoutError:
                serve.kill()
                await serve.wait()
        await self.publisher.stop()
        await self.cloud.stop()
        await self.setup.db.dispose()
        shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def serve(self) -> asyncio.subprocess.Process | None:
        """The first replica's process (the only one unless `replicas`)."""
        return self.serves[0] if self.serves else None

    @property
    def http(self) -> httpx.AsyncClient | None:
        """A client of the first replica, whose URL bcd's agent names."""
        return self.https[0] if self.https else None

    @property
    def serve_pid(self) -> int:
        assert self.serve is not None
        return self.serve.pid

    @property
    def serve_pids(self) -> list[int]:
        return [serve.pid for serve in self.serves]

    async def secret(self, value: str) -> str:
        """`value` sealed as a secret of the rig's tenant; its `secret://` reference."""
        return await self.setup.secrets.create(self.tenant_id, value)

    async def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/fleet/apply at the serve process; its plan."""
        assert self.http is not None
        answer = await self.http.post("/v1/fleet/apply", json={"document": document})
        if answer.status_code != 200:
            raise RuntimeError(f"apply answered {answer.status_code}: {answer.text[:2000]}")
        plan: dict[str, Any] = answer.json()
        return plan

    async def metrics(self) -> dict[tuple[str, str, str], float]:
        """The serve processes' provider and Kubernetes call counters, summed: (api, method, access) -> count."""
        counts: dict[tuple[str, str, str], float] = {}
        for replica in range(len(self.https)):
            for key, value in (await self.metrics_of(replica)).items():
                counts[key] = counts.get(key, 0.0) + value
        return counts

    async def runs_of(self, replica: int) -> dict[tuple[str, str], float]:
        """One replica's engine counters: (kind, result) -> reconcile runs, and (kind, "stale") -> completions
        it dropped because the item's lease had passed to another worker."""
        text = (await self.https[replica].get("/metrics")).text
        counts: dict[tuple[str, str], float] = {}
        for line in text.splitlines():
            for family in ("better_compute_reconcile_runs_total{", "better_compute_reconcile_stale_total{"):
                if line.startswith(family):
                    labels_text, _, value = line[len(family) :].rpartition("} ")
                    labels = {k: v.strip('"') for k, v in (p.split("=", 1) for p in labels_text.split(","))}
                    counts[(labels["kind"], labels.get("result", "stale"))] = float(value)
        return counts

    async def metrics_of(self, replica: int) -> dict[tuple[str, str, str], float]:
        """One replica's provider and Kubernetes call counters: (api, method, access) -> count."""
        text = (await self.https[replica].get("/metrics")).text
        counts: dict[tuple[str, str, str], float] = {}
        for line in text.splitlines():
            for family, api_label in (
                ("better_compute_provider_calls_total{", "provider"),
                ("better_compute_kubernetes_calls_total{", None),
            ):
                if not line.startswith(family):
                    continue
                labels_text, _, value = line[len(family) :].rpartition("} ")
                labels = dict(part.split("=", 1) for part in labels_text.split(","))
                labels = {k: v.strip('"') for k, v in labels.items()}
                api = labels[api_label] if api_label else "kubernetes"
                method = labels["method"] if api_label else f"{labels['method']} {labels['resource']}"
                key = (api, method, labels["access"])
                counts[key] = counts.get(key, 0.0) + float(value)
        return counts

    async def busy(self) -> tuple[int, int]:
        """Work items leased now, and items due now that nobody holds."""
        now = self.clock.now()
        async with self.setup.db.session() as session:
            leased = func.count().filter(WorkItem.lock_token.is_not(None))
            waiting = func.count().filter(WorkItem.lock_token.is_(None), WorkItem.due_at <= now)
            row = (await session.execute(select(leased, waiting).select_from(WorkItem))).one()
            return int(row[0]), int(row[1])

    async def next_due(self) -> datetime | None:
        async with self.setup.db.session() as session:
            found: datetime | None = await session.scalar(
                select(func.min(WorkItem.due_at)).where(WorkItem.lock_token.is_(None))
            )
            return found

    async def connected(self) -> int:
        """Nodes whose gateway session is connected now."""
        async with self.setup.db.session() as session:
            query = select(func.count()).select_from(NodeSessionRow).where(NodeSessionRow.connected.is_(True))
            return int(await session.scalar(query) or 0)

    async def quiesce(self) -> bool:
        """Wait (up to `hold` seconds) until the control plane is quiet at the clock's now; see the docstring.

        False when it is not: the time ran out, or items are due that the serve engine does not
        claim. That engine waits up to its poll (ENGINE_POLL_SECONDS on its clock) for an item made
        due by a run that ended while it was reading the next due time, as it would in real time;
        only moving the clock ends that wait.
        """
        deadline = time.perf_counter() + self.hold
        await self.cloud.settle()
        if not await self.publisher.synced(self.hold):
            self.held_too_long += 1
            return False
        calm = unclaimed = 0
        while time.perf_counter() < deadline:
            for serve in self.serves:
                if serve.returncode is not None:
                    raise RuntimeError(f"better-compute serve exited with code {serve.returncode}")
            joining = self.cloud.bcd.joining > 0 or await self.connected() < len(self.cloud.bcd.joined)
            leased, waiting = await self.busy()
            calm = calm + 1 if not (joining or leased or waiting) else 0
            unclaimed = unclaimed + 1 if waiting and not (joining or leased) else 0
            if calm >= 2:  # two looks in a row: a run that just ended may have queued another
                return True
            if unclaimed >= 10:
                return False
            await asyncio.sleep(0.01)
        self.held_too_long += 1
        return False

    async def step_until(self, until: datetime) -> None:
        """Move the clock event by event (at most `step` seconds a move) up to `until`, quiet at each."""
        while True:
            quiet = await self.quiesce()
            now = self.clock.now()
            if now >= until and quiet:
                return
            events = [t for t in (await self.next_due(), self.clock.next_wakeup()) if t is not None and t > now]
            if not quiet:
                events.append(now + timedelta(seconds=ENGINE_POLL_SECONDS))
            target = min([*events, now + timedelta(seconds=self.step), max(until, now)])
            if target > now:
                self.clock.advance_to(target)
            elif not quiet:
                self.clock.advance(ENGINE_POLL_SECONDS)

    async def full_pass(self, kinds: tuple[str, ...]) -> None:
        """Make every item of `kinds` due now, and let the control plane run them all once."""
        async with self.setup.db.transaction() as session:
            await session.execute(update(WorkItem).where(WorkItem.kind.in_(kinds)).values(due_at=self.clock.now()))
        # the serve engine notices a write from another process at its next poll
        self.clock.advance(ENGINE_POLL_SECONDS)
        await self.step_until(self.clock.now())

    @contextlib.asynccontextmanager
    async def profiling(self) -> Any:
        """cProfile (unless `cprofile` is false) and a count of SQL statements in the serve process while
        inside (needs `profile`); the stats are at `profile` after, the statements at `<profile>.sql.json`."""
        if self.profile is None or self.serve is None:
            yield
            return
        counted = self.profile.with_name(self.profile.name + ".sql.json")
        self.profile.unlink(missing_ok=True)
        counted.unlink(missing_ok=True)
        self.serve.send_signal(signal.SIGUSR1)
        try:
            yield
        finally:
            self.serve.send_signal(signal.SIGUSR2)
            deadline = time.perf_counter() + 60
            while not counted.exists() and time.perf_counter() < deadline:  # noqa: ASYNC110 another process writes it
                await asyncio.sleep(0.1)
