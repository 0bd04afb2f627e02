"""The node gateway under load: N bcd connections over pinned TLS, heartbeats, push latency, memory.

One gateway process (this one) serves the real ASGI endpoints with TLS on loopback. A
child process runs N real bcd agents (`better_compute.bcd.agent.Agent`, real clock), each
a joined node of one pool. This process also runs one probe node in a pool of its own:
a full bcd (agent + device plugin) with a fake kubelet, so that every reservation in the
probe pool lands on it.

Measured:
- whether all N stay connected through heartbeats (no session closed, none reconnected)
  for `--intervals` heartbeat intervals, past the 3-interval timeout;
- the gateway process's memory per connected node: RSS after all N connected and the
  heartbeats ran, minus RSS before the child connected, over N;
- the latency from `Reservations.create()` (and `release()`) being called to the probe's
  ListAndWatch stream yielding the changed device list: p50 and p99.

    python bench/gateway.py --nodes 1000
    python bench/gateway.py --nodes 1000 --database postgresql://postgres@127.0.0.1:5432/postgres
    python bench/gateway.py --nodes 10000 --client-processes 4

`--objects` also counts the gateway's Python objects by type before and after the nodes
connect (gc.get_objects(), cheap enough for 10,000 nodes); `--tracemalloc` shows where the
live Python memory was allocated (slow: give it a long `--heartbeat`). Every node connects
from 127.0.0.1, so the bench raises the per-address cap on connections awaiting their
hello to the total cap, as an operator with a fleet behind one NAT would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import logging
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import trustme
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.api.serving import websocket_protocol
from better_compute.bcd.agent import Agent
from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import CredentialStore, NodeCredential
from better_compute.bcd.daemon import Bcd
from better_compute.bcd.inventory import simulated_gpus
from better_compute.bcd.pins import spki_pin
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.bcd.state import NodeState
from better_compute.compute import compute_services
from better_compute.core.clock import SystemClock
from better_compute.gateway.handshakes import MAX_UNAUTHENTICATED
from better_compute.gateway.joining import join_node
from better_compute.gateway.routes import NodeSocketFirst
from better_compute.gateway.service import Gateway
from better_compute.gateway.tables import NodeSessionRow
from better_compute.iam import Iam
from better_compute.store import Database
from better_compute.testing.loopback import LoopbackServer
from better_compute.wire.protocol import Inventory, OsInfo


async def _connected(session: AsyncSession) -> int:
    """How many node sessions show connected."""
    count = await session.scalar(select(func.count()).select_from(NodeSessionRow).where(NodeSessionRow.connected))
    return int(count or 0)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def trimmed_rss_kib() -> int:
    """RSS after glibc hands freed heap back to the OS: what is live, without the allocator's slack."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_kib()


def raise_open_files() -> int:
    """The soft open-files limit raised to the hard one: each connected node is a socket at each end."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def heap_bytes() -> dict[str, int]:
    """Bytes in the two allocators: live in glibc's malloc (OpenSSL, buffers, Python's objects over
    512 bytes) and free in it; live in Python's small-object allocator, and in its arenas. What
    the process holds beyond the live bytes is the allocators' slack (fragmentation)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    with tempfile.TemporaryFile() as captured:  # sys._debugmallocstats writes to the C stderr
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        lines = captured.read().decode().splitlines()

    def number(prefix: str) -> int:
        line = next(line for line in lines if line.startswith(prefix))
        return int(line.rsplit("=", 1)[1].replace(",", "").strip())

    return {
        "malloc live": info.uordblks + info.hblkhd,
        "malloc free": info.fordblks,
        "small live": number("# bytes in allocated blocks"),
        "small arenas": number("# arenas allocated current") * 1024 * 1024,
    }


def object_counts() -> tuple[Counter[str], Counter[str]]:
    """The live objects the garbage collector tracks, by type: how many, and their bytes (sys.getsizeof)."""
    gc.collect()
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for o in gc.get_objects():
        name = type(o).__qualname__
        counts[name] += 1
        sizes[name] += sys.getsizeof(o)
    return counts, sizes


def print_objects(before: tuple[Counter[str], Counter[str]], nodes: int) -> None:
    counts, sizes = object_counts()
    counts.subtract(before[0])
    sizes.subtract(before[1])
    print("objects per connected node, by type (gc.get_objects: tracked types only; bytes by sys.getsizeof):")
    for name, size in sizes.most_common(25):
        print(f"  {counts[name] / nodes:7.2f}  {size / nodes:8.0f} B  {name}")
    print(f"  {sum(counts.values()) / nodes:7.2f}  {sum(sizes.values()) / nodes:8.0f} B  in all")


def inventory(name: str, gpus: int) -> Inventory:
    return Inventory(os=OsInfo(hostname=name, kubernetes_node_name=name), gpus=simulated_gpus(f"{gpus}xH100", name))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Kubelet(pb_grpc.RegistrationServicer):
    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        return pb.Empty()


async def open_database(spec: str, directory: Path) -> tuple[Database, Database | None, str | None]:
    if spec == "sqlite":
        db = Database(f"sqlite:///{directory / 'bench.db'}")
        await db.upgrade()
        return db, None, None
    admin = Database(spec)
    name = f"bc_bench_{uuid.uuid4().hex[:8]}"
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    db = Database(make_url(admin.url).set(database=name).render_as_string(hide_password=False), pool_size=20)
    await db.upgrade()
    return db, admin, name


async def drop_database(admin: Database, name: str) -> None:
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    await admin.dispose()


async def gateway_side(args: argparse.Namespace) -> None:
    limit = raise_open_files()
    if args.nodes + 64 > limit:
        raise SystemExit(f"--nodes {args.nodes} needs more open files than this process may have ({limit})")
    directory = Path(tempfile.mkdtemp(prefix="bcgw-bench-", dir="/tmp"))
    db, admin, name = await open_database(args.database, directory)
    clock = SystemClock()
    tenant = await Iam(db, clock).create_tenant("bench")
    compute = compute_services(db, clock)
    site = await compute.sites.create(tenant.id, "k8s", "shared", "us-east-1")
    fleet = await compute.pools.create(tenant.id, "fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
    probe_pool = await compute.pools.create(tenant.id, "probe", site.id, "metal-host", "H100", {"kubernetes": {}})
    gateway = Gateway(
        db,
        clock,
        compute.reservations,
        heartbeat_seconds=args.heartbeat,
        missed_heartbeats=3,
        max_unauthenticated_per_client=MAX_UNAUTHENTICATED,
    )

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file = directory / "gateway.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    pin = spki_pin(cert.cert_chain_pems[0].bytes())
    app = NodeSocketFirst()  # as create_app makes it
    for router in gateway.routers():
        app.include_router(router)
    app.gateway = gateway

    started = time.perf_counter()
    _, fleet_token = await compute_tokens(gateway, tenant.id, fleet.id, args.nodes)
    _, probe_token = await compute_tokens(gateway, tenant.id, probe_pool.id, 1)
    nodes = []
    async with db.transaction() as session:
        for i in range(args.nodes):
            joined = await join_node(
                session, now=clock.now(), token=fleet_token, inventory=inventory(f"node-{i:05d}", args.gpus)
            )
            nodes.append(
                {
                    "name": f"node-{i:05d}",
                    "nodeId": joined.node.id,
                    "poolId": joined.node.pool_id,
                    "credential": joined.credential,
                }
            )
        probe = await join_node(session, now=clock.now(), token=probe_token, inventory=inventory("probe", 8))
    print(f"joined {args.nodes + 1} nodes in {time.perf_counter() - started:.1f} s", flush=True)

    tls = {} if args.plain else {"certfile": str(cert_file), "keyfile": str(cert_file)}
    async with LoopbackServer(app, name="gateway", ws=websocket_protocol(), **tls) as server:  # as `serve` runs it
        await gateway.start()
        wss = server.url.replace("https://", "wss://").replace("http://", "ws://")
        pins = () if args.plain else (pin,)
        probe_config = BcdConfig(
            gateway_url=wss,
            pins=pins,
            insecure=args.plain,
            state_dir=directory / "probe",
            kubelet_socket=directory / "kubelet.sock",
        )
        CredentialStore(probe_config.state_dir).save(
            NodeCredential(probe.node.id, probe.node.pool_id, probe.credential)
        )
        kubelet = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(Kubelet(), kubelet)
        kubelet.add_insecure_port(f"unix://{probe_config.kubelet_socket}")
        await kubelet.start()
        bcd = Bcd(probe_config, clock=clock, inventory=inventory("probe", 8))
        probe_task = asyncio.create_task(bcd.run())
        connected = asyncio.create_task(bcd.agent.connected.wait())
        await asyncio.wait({probe_task, connected}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if not connected.done():
            connected.cancel()
            raise RuntimeError(
                f"the probe node did not connect: {probe_task.exception() if probe_task.done() else 'timeout'}"
            )

        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0.2)
        baseline = Baseline(rss_kib(), trimmed_rss_kib(), heap_bytes(), object_counts() if args.objects else None)
        if args.tracemalloc:
            tracemalloc.start(8)
            baseline.traced = tracemalloc.take_snapshot()
        children = []
        for k in range(args.client_processes):
            spec = directory / f"clients-{k}.json"
            share = nodes[k :: args.client_processes]
            spec.write_text(json.dumps({"url": wss, "pins": pins, "nodes": share, "gpus": args.gpus}))
            children.append(await asyncio.create_subprocess_exec(sys.executable, __file__, "--client", str(spec)))
        try:
            await measure(args, gateway, db, baseline, children)
            made, released = await latency(bcd, compute.reservations, tenant.id, probe_pool.id, args.samples)
            print(
                f"reservation -> ListAndWatch, {args.samples} samples with {args.nodes} other nodes connected: "
                f"made p50 {statistics.median(made):.1f} ms p99 {percentile(made, 0.99):.1f} ms; "
                f"released p50 {statistics.median(released):.1f} ms p99 {percentile(released, 0.99):.1f} ms",
                flush=True,
            )
        finally:  # never leave a client process behind, whatever failed
            for child in children:
                if child.returncode is None:
                    child.send_signal(signal.SIGTERM)
            for child in children:
                await child.wait()
        while True:  # let the sessions record their end before the server stops
            async with db.session() as session:
                if await _connected(session) <= 1:
                    break
            await asyncio.sleep(0.2)
        probe_task.cancel()
        await asyncio.gather(probe_task, return_exceptions=True)
        await kubelet.stop(grace=None)
        await gateway.close()
    await db.dispose()
    if admin is not None and name is not None:
        await drop_database(admin, name)


class Baseline:
    """The gateway process before any fleet node connected."""

    def __init__(
        self, rss: int, trimmed: int, heap: dict[str, int], objects: tuple[Counter[str], Counter[str]] | None
    ) -> None:
        self.rss = rss
        self.trimmed = trimmed
        self.heap = heap
        self.objects = objects
        self.traced: tracemalloc.Snapshot | None = None


async def measure(
    args: argparse.Namespace,
    gateway: Gateway,
    db: Database,
    baseline: Baseline,
    children: list[asyncio.subprocess.Process],
) -> None:
    """Wait for every node, hold them through the heartbeats, then say what they cost the gateway."""
    started = time.perf_counter()
    while len(gateway.hub.connections) < args.nodes + 1:
        if any(child.returncode is not None for child in children):
            raise RuntimeError("a client process died")
        await asyncio.sleep(0.1)
    print(f"{args.nodes} nodes connected in {time.perf_counter() - started:.1f} s", flush=True)
    sessions = {node_id: c.session_id for node_id, c in gateway.hub.connections.items()}
    await asyncio.sleep(args.heartbeat * args.intervals)
    kept = sum(1 for node_id, c in gateway.hub.connections.items() if sessions.get(node_id) == c.session_id)
    async with db.session() as session:
        connected = await _connected(session)
    gc.collect()
    after = rss_kib()
    after_trimmed = trimmed_rss_kib()
    heap = heap_bytes()
    if baseline.traced is not None:
        snapshot = tracemalloc.take_snapshot()
        diff = snapshot.compare_to(baseline.traced, "traceback")
        live = sum(d.size_diff for d in diff)
        print(f"live Python memory (tracemalloc): {live / 1024 / args.nodes:.1f} KiB per connected node")
        for stat in snapshot.compare_to(baseline.traced, "filename")[:10]:
            print(f"  {stat.size_diff / 1024 / args.nodes:6.1f} KiB/node  in {stat.traceback[0].filename}")
        for stat in diff[:12]:
            print(f"  {stat.size_diff / 1024 / args.nodes:6.1f} KiB/node  {stat.traceback.format()[-1].strip()}")
            for line in stat.traceback.format()[-6:-1]:
                print("        ", line.strip())
        tracemalloc.stop()
    if baseline.objects is not None:
        print_objects(baseline.objects, args.nodes)
    print(
        f"after {args.intervals} heartbeat intervals of {args.heartbeat:.0f} s: {connected} connected in the "
        f"database, {kept} of {args.nodes + 1} on their first session",
        flush=True,
    )
    print(
        f"gateway RSS {baseline.rss} KiB -> {after} KiB: {(after - baseline.rss) / args.nodes:.1f} KiB per "
        f"connected node",
        flush=True,
    )
    print(
        f"after malloc_trim: {baseline.trimmed} KiB -> {after_trimmed} KiB: "
        f"{(after_trimmed - baseline.trimmed) / args.nodes:.1f} KiB per connected node",
        flush=True,
    )
    print(
        "heap per connected node: "
        + ", ".join(f"{name} {(heap[name] - baseline.heap[name]) / 1024 / args.nodes:.1f} KiB" for name in heap),
        flush=True,
    )


async def compute_tokens(gateway: Gateway, tenant_id: str, pool_id: str, uses: int) -> tuple[str, str]:
    token, value = await gateway.tokens.create(tenant_id, pool_id, uses=uses)
    return token.id, value


async def latency(
    bcd: Bcd, reservations: Any, tenant_id: str, pool_id: str, samples: int
) -> tuple[list[float], list[float]]:
    made: list[float] = []
    released: list[float] = []
    async with grpc.aio.insecure_channel(f"unix://{bcd.plugin.socket}") as channel:
        stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
        await stream.read()
        for _ in range(samples):
            started = time.perf_counter()
            reservation = await reservations.create(tenant_id, pool_id, 2)
            update = await stream.read()
            made.append((time.perf_counter() - started) * 1000)
            assert len(update.devices) == 2
            started = time.perf_counter()
            await reservations.release(tenant_id, reservation.id)
            update = await stream.read()
            released.append((time.perf_counter() - started) * 1000)
            assert len(update.devices) == 0
        stream.cancel()
    return made, released


async def client_side(spec_file: str) -> None:
    """One client process: its share of the fleet's bcd agents, until SIGTERM or the gateway process is gone."""
    raise_open_files()
    parent = os.getppid()
    spec = json.loads(Path(spec_file).read_bytes())  # noqa: ASYNC240 - once, before anything runs
    config = BcdConfig(gateway_url=spec["url"], pins=tuple(spec["pins"]), insecure=not spec["pins"])
    clock = SystemClock()
    agents = []
    for node in spec["nodes"]:
        credential = NodeCredential(node["nodeId"], node["poolId"], node["credential"])
        agents.append(Agent(config, credential, inventory(node["name"], spec["gpus"]), NodeState([]), clock=clock))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(agent.run()) for agent in agents]
    while not stop.is_set() and os.getppid() == parent:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs per node")
    parser.add_argument("--heartbeat", type=float, default=10.0, help="heartbeat interval, seconds")
    parser.add_argument("--intervals", type=int, default=4, help="heartbeat intervals to stay connected through")
    parser.add_argument("--samples", type=int, default=200, help="reservations made and released on the probe")
    parser.add_argument("--database", default="sqlite", help="sqlite, or a postgresql:// URL")
    parser.add_argument("--plain", action="store_true", help="ws:// without TLS, to see what TLS costs")
    parser.add_argument("--tracemalloc", action="store_true", help="also show where the live memory is")
    parser.add_argument("--objects", action="store_true", help="also count the gateway's objects by type")
    parser.add_argument(
        "--client-processes", type=int, default=1, help="processes the nodes' agents run in (10,000 need several)"
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client_processes < 1:
        parser.error("--client-processes must be at least 1")
    if args.client:
        asyncio.run(client_side(args.client))
    else:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        asyncio.run(gateway_side(args))


if __name__ == "__main__":
    main()
