"""A fleet of N pools x M nodes converging on one replica, across GKE, EKS and DOKS.

The real reconcilers (kubernetes module) and the real drivers run against
`testing.Cloud` on its SimClock, on one database. Every Node runs bcd: it redeems the
pool's join token at the control plane and keeps a TLS-pinned gateway connection. By
default (`--bcd-processes 0`) the whole bcd runs in the bench's process
(testing/bcd_runtime.py), as a real pod would, at about 6 open files per Node. With
`--bcd-processes K` bcd's real join and gateway agent run in K worker processes
(testing/bcd_workers.py; no device plugin server, whose kubelet socket is in-process),
so the bench's process holds only the control plane's ends of the sessions (about 2
open files per Node) and bcd's TLS and WebSocket work runs on other cores; bcd's own
real-time timeouts (30 s join, 20 s keepalive) then meet the bench's event-loop stalls,
which at 100 pools x 10 Nodes closed sessions. The `joins` line says which ran, and the
`cap on joins in flight` line the gateway's cap (`--max-joins-in-flight`, the product's default
unless given). The run applies a generated FleetConfig
document and steps simulated time until every substrate is `ready` with all its
Nodes joined. It reports:

    wall           seconds of wall time from apply to converged, and per pool
    creation       provider reads per cluster creation (kubernetes/calls.py's tally)
    ratio          per provider: simulated seconds from apply to `ready` with every Node
                   joined, over the emulated provisioning time (apply to the pool's last
                   Node registered at the emulated cluster). The simulated clock is held
                   (up to 60 s of wall time a step) while bcd joins and gateway sessions
                   are under way, since they take real time.
    open files     the bench process's peak open file descriptors (the hard limit caps it)
    stall          the longest wait of the bench's event loop for a turn while converging
    cpu            seconds of CPU over the whole run, the bench's process and the bcd workers
    quiet          one full pass of every substrate and cluster once converged: provider
                   writes (must be 0), provider reads, Kubernetes writes and reads
    per minute     provider and Kubernetes reads per converged pool per simulated minute,
                   over `--quiet-minutes` of simulated time after convergence
    SQL            with `--count-sql`: SQL statements this process sent from apply to
                   converged, a Node, those on the work queue among them (the clock
                   driver's steps claim and read the next due time, so that share varies
                   with how the run was stepped), and the most frequent shapes

    python bench/fleet.py --pools 100 --nodes 4
    python bench/fleet.py --pools 100 --nodes 4 --bcd-processes 2
    python bench/fleet.py --pools 100 --nodes 10 --max-joins-in-flight 100000   # no cap on joins
    python bench/fleet.py --pools 1000 --nodes 10 --database postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import resource
import secrets
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event, select, text, update
from sqlalchemy.engine import Engine, make_url

from better_compute.engine.models import WorkItem
from better_compute.gateway.handshakes import MAX_UNAUTHENTICATED
from better_compute.gateway.join_limit import MAX_JOINS_IN_FLIGHT
from better_compute.gateway.module import gateway
from better_compute.kubernetes.calls import CALLS, Call
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_KIND, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.tables import SubstrateRow
from better_compute.server import Compute
from better_compute.store import Database
from better_compute.testing import Cloud

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-fleet-server-secret-0123456789abcdef"
KINDS = ("gke", "eks", "doks")
PROVIDER = {"gke": "gcp", "eks": "aws", "doks": "digitalocean"}
PLACES = {"gke": "us-central1", "eks": "us-east-1", "doks": "tor1"}
FLAVOR = {
    "gke": ("h100", "a3-highgpu-8g", "nvidia-h100-80gb"),
    "eks": ("h100", "p5.48xlarge", "nvidia-h100"),
    "doks": ("h100", "gpu-h100x8-640gb", "nvidia-h100"),
}
DOKS_POOLS_PER_TOKEN = 25
PER_ZONE = {"gke": 1, "eks": 2, "doks": 1}
"""How many Nodes one `nodes` makes: the GKE account pins one zone, the EKS one has subnets in two."""


def account_config(kind: str, token_ref: str) -> dict[str, Any]:
    if kind == "gke":
        return {"projectId": "bench-project", "zones": ["us-central1-a"]}
    if kind == "eks":
        config: dict[str, Any] = json.loads((ROOT / "examples" / "fleet-eks.json").read_text())["providerAccounts"][0][
            "config"
        ]
        return config
    return {"token": token_ref, "regions": ["tor1"]}


def document(pools: int, nodes: int, doks_tokens: list[str]) -> dict[str, Any]:
    """N pools spread evenly over GKE, EKS and DOKS, each with one 8-GPU flavor of `nodes` Nodes.

    DOKS pools are spread over one account per token (DigitalOcean limits each token to
    5,000 requests an hour), `DOKS_POOLS_PER_TOKEN` pools to a token.
    """
    accounts = [{"name": f"{k}-account", "provider": PROVIDER[k], "config": account_config(k, "")} for k in KINDS[:2]]
    accounts += [
        {"name": f"doks-account-{i}", "provider": "digitalocean", "config": account_config("doks", ref)}
        for i, ref in enumerate(doks_tokens)
    ]
    doc: dict[str, Any] = {
        "version": 1,
        "sites": [{"name": f"{k}-site", "kind": "shared", "region": PLACES[k]} for k in KINDS],
        "providerAccounts": accounts,
        "pools": [],
    }
    for n in range(pools):
        kind = KINDS[n % 3]
        account = f"doks-account-{n // 3 // DOKS_POOLS_PER_TOKEN}" if kind == "doks" else f"{kind}-account"
        name, machine, gpu = FLAVOR[kind]
        if nodes % PER_ZONE[kind]:
            raise SystemExit(f"--nodes must be a multiple of {PER_ZONE[kind]} for {kind}")
        flavor = {
            "name": name,
            "machineType": machine,
            "nodes": nodes // PER_ZONE[kind],
            "gpus": {"type": gpu, "count": 8},
        }
        doc["pools"].append(
            {
                "name": f"pool-{n:04d}",
                "site": f"{kind}-site",
                "class": "metal-host",
                "gpuModel": "H100",
                "policy": {
                    "kubernetes": {"platformOperated": True},
                    "substrate": {
                        "kind": "kubernetes",
                        "account": account,
                        "cluster": {"create": {"location": PLACES[kind]}},
                        "flavors": [flavor],
                    },
                },
            }
        )
    return doc


@asynccontextmanager
async def fresh_database(target: str) -> AsyncIterator[str]:
    if target == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'fleet.db'}"
            db = Database(url)
            await db.upgrade()
            await db.dispose()
            yield url
        return
    admin = Database(target)
    name = f"bc_bench_{uuid.uuid4().hex[:8]}"
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin.url).set(database=name).render_as_string(hide_password=False)
    db = Database(url)
    await db.upgrade()
    await db.dispose()
    try:
        yield url
    finally:
        async with admin.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


def split(calls: Counter[Call]) -> dict[str, int]:
    """Provider writes and reads, Kubernetes writes and reads."""
    out = {"provider writes": 0, "provider reads": 0, "kubernetes writes": 0, "kubernetes reads": 0}
    for call, count in calls.items():
        side = "kubernetes" if call.api == "kubernetes" else "provider"
        out[f"{side} {call.access}s"] += count
    return out


async def converged(compute: Compute, nodes: int) -> dict[str, datetime]:
    """pool id -> when its substrate last recorded `ready`, for the pools that are ready with every Node joined."""
    async with compute.db.session() as session:
        rows = (await session.scalars(select(SubstrateRow))).all()
    return {r.pool_id: r.updated_at for r in rows if r.state == "ready" and r.nodes_joined == nodes == r.nodes_listed}


def provisioned_at(cloud: Cloud) -> dict[str, datetime]:
    """pool id -> when the emulated cluster registered the pool's last Node (the provider's work done)."""
    last: dict[str, datetime] = {}
    for cluster in cloud.kube.clusters.values():
        for node in cluster.objects("Node"):
            pool = (node["metadata"].get("labels") or {}).get(SUBSTRATE_POOL_LABEL)
            if pool is None:
                continue
            created = datetime.fromisoformat(node["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
            last[pool] = max(last.get(pool, created), created)
    return last


async def full_pass(compute: Compute) -> None:
    """Make every substrate and cluster item due now, and run them all once."""
    async with compute.db.transaction() as session:
        await session.execute(
            update(WorkItem).where(WorkItem.kind.in_((SUBSTRATE_KIND, CLUSTER_KIND))).values(due_at=compute.clock.now())  # type: ignore[attr-defined]
        )
    await compute.run_until_idle()


def doks_tokens(cloud: Cloud, pools: int) -> list[str]:
    """One DigitalOcean token a `DOKS_POOLS_PER_TOKEN` DOKS pools, each its own account (team) at the emulator.

    Each account has its own droplet limit as well as its own request limit: one team's 1,000
    droplets hold 90 DOKS pools of 10 Nodes beside the 100 clusters' one-node system pools, so 300 pools
    on one team's tokens left 10 of them refused (quotaExceeded) for good.
    """
    tokens = [f"dop_v1_{secrets.token_hex(32)}" for _ in range(-(-pools // 3 // DOKS_POOLS_PER_TOKEN) or 1)]
    for n, token in enumerate(tokens):
        cloud.doks.add_token(token, team=f"team-{n}")
    return tokens


def progress(progress_at: float, started: float, simulated: timedelta, ready: int, pools: int) -> float:
    """Say how far convergence got, every 30 s of wall time, and give up after 3 simulated hours;
    returns when to say it next."""
    if simulated > timedelta(hours=3):
        raise SystemExit(f"not converged within 3 simulated hours: {ready} of {pools} pools")
    if time.perf_counter() <= progress_at:
        return progress_at
    minutes = simulated.total_seconds() / 60
    print(
        f"... {time.perf_counter() - started:.0f} s: {ready} of {pools} pools converged after {minutes:.1f} simulated minutes",
        flush=True,
    )
    return time.perf_counter() + 30


def open_files() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


async def bench(
    pools: int,
    nodes: int,
    database: str,
    step: float,
    quiet_minutes: float,
    bcd_processes: int,
    max_joins: int,
    count_sql: bool = False,
) -> Report:
    cloud = Cloud(bcd_processes=bcd_processes)
    await cloud.start()
    report = Report()
    report["pools"], report["nodes per pool"] = pools, nodes
    report["joins"] = (
        f"bcd join + gateway agent (no device plugin) in {bcd_processes} worker processes (testing/bcd_workers.py)"
        if bcd_processes
        else "the whole bcd (join, gateway agent, device plugin) in the bench's process (testing/bcd_runtime.py)"
    )
    peak_files = open_files()
    stalls = Stalls()
    async with fresh_database(database) as url:
        # Every bcd here connects from 127.0.0.1: one address for the whole fleet, as behind one NAT
        # gateway, so the per-address cap on connections awaiting their hello is the total cap.
        fleet_gateway = gateway(max_unauthenticated_per_client=MAX_UNAUTHENTICATED, max_joins_in_flight=max_joins)
        report["cap on joins in flight"] = max_joins
        compute = cloud.compute(url, SECRET, providers=cloud.providers(max_workers=16), modules=[fleet_gateway])
        try:
            tenant = await compute.iam.create_tenant("bench")
            refs = [await compute.secrets.create(tenant.id, token) for token in doks_tokens(cloud, pools)]
            cloud.serve(compute)
            doc = document(pools, nodes, refs)
            kind_of = {}
            before = CALLS.snapshot()
            statements = Statements() if count_sql else None
            applied_at = cloud.clock.now()
            started = time.perf_counter()
            await compute.fleet.apply(doc, tenant_id=tenant.id)
            for pool in await compute.pools.list(tenant.id):
                kind_of[pool.id] = pool.policy["substrate"]["account"].split("-")[0]
            hub = compute.module("gateway").gateway.hub
            ready: dict[str, datetime] = {}
            per_kind: dict[str, float] = {}
            progress_at = time.perf_counter() + 30
            while len(ready) < pools:
                await compute.run_until_idle(until=cloud.clock.now() + timedelta(seconds=step))
                await cloud.settle()
                await asyncio.sleep(0.005)
                held = time.perf_counter() + 60
                while (
                    cloud.bcd.joining or len(hub.connections) < len(cloud.bcd.joined)
                ) and time.perf_counter() < held:
                    # joins and gateway sessions take real time: hold the simulated clock until they are in
                    await asyncio.sleep(0.01)
                    await compute.run_until_idle()
                peak_files = max(peak_files, open_files())
                for pool_id, at in (await converged(compute, nodes)).items():
                    ready.setdefault(pool_id, at)
                for kind in KINDS:
                    mine = [p for p, k in kind_of.items() if k == kind]
                    if kind not in per_kind and mine and all(p in ready for p in mine):
                        calls = CALLS.since(before)
                        per_kind[kind] = sum(
                            v for c, v in calls.items() if c.api == PROVIDER[kind] and c.access == "read"
                        ) / len(mine)
                progress_at = progress(progress_at, started, cloud.clock.now() - applied_at, len(ready), pools)
            wall = time.perf_counter() - started
            if statements is not None:
                statements.stop()
                total = sum(statements.shapes.values())
                report["SQL statements to converge, a Node"] = round(total / (pools * nodes), 1)
                queued = sum(count for shape, count in statements.shapes.items() if " work_items" in shape)
                # the clock driver's steps claim and read the next due time, so this share varies from run to run
                report["of which on the work queue (claim, next due, renew, complete, enqueue), a Node"] = round(
                    queued / (pools * nodes), 1
                )
                report["SQL statements to converge, a Node, by shape (the 12 most)"] = {
                    shape: round(count / (pools * nodes), 1) for shape, count in statements.shapes.most_common(12)
                }
            creation = CALLS.since(before)
            report["wall to converge (s)"] = round(wall, 2)
            report["wall per pool (ms)"] = round(1000 * wall / pools, 1)
            report["simulated minutes to converge"] = round((cloud.clock.now() - applied_at).total_seconds() / 60, 1)
            report["bcd joins"] = cloud.bcd.joins
            report["longest event loop stall to converge (s)"] = stalls.stop()
            report["peak open files (parent)"] = f"{max(peak_files, open_files())} (limit {limit_files()})"
            clusters_made = sum(v for c, v in creation.items() if c.method == "ensure_cluster")
            report["provider reads per cluster creation"] = round(
                sum(v for c, v in creation.items() if c.api != "kubernetes" and c.access == "read") / clusters_made, 1
            )
            report["provider reads per cluster creation, by provider (until its last pool converged)"] = {
                k: round(v, 1) for k, v in per_kind.items()
            }
            report["calls to converge"] = split(creation)
            by_method: Counter[str] = Counter()
            for call, count in creation.items():
                if call.api != "kubernetes" and call.access == "read":
                    by_method[call.method] += count
            report["provider reads to converge, by method"] = dict(sorted(by_method.items()))
            provisioned = provisioned_at(cloud)
            ratios: dict[str, list[float]] = {k: [] for k in KINDS}
            for pool_id, at in ready.items():
                emulated = (provisioned[pool_id] - applied_at).total_seconds()
                ratios[kind_of[pool_id]].append((at - applied_at).total_seconds() / emulated)
            report["apply->ready / emulated provisioning, by provider (median, max)"] = {
                k: (round(statistics.median(v), 3), round(max(v), 3)) for k, v in ratios.items() if v
            }

            before = CALLS.snapshot()
            await full_pass(compute)
            report["one full pass once converged"] = split(CALLS.since(before))

            before = CALLS.snapshot()
            await compute.run_until_idle(until=cloud.clock.now() + timedelta(minutes=quiet_minutes))
            quiet = split(CALLS.since(before))
            report[f"over {quiet_minutes:g} converged minutes"] = quiet
            report["reads per converged pool per minute (provider, kubernetes)"] = (
                round(quiet["provider reads"] / pools / quiet_minutes, 3),
                round(quiet["kubernetes reads"] / pools / quiet_minutes, 3),
            )
        finally:
            await cloud.stop()
            await compute.close()
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    report["cpu seconds, whole run (bench process, bcd workers)"] = (
        round(own.ru_utime + own.ru_stime, 1),
        round(workers.ru_utime + workers.ru_stime, 1),
    )
    return report


class Statements:
    """Every SQL statement this process sends while counting, by shape (`--count-sql`)."""

    def __init__(self) -> None:
        self.shapes: Counter[str] = Counter()
        event.listen(Engine, "before_cursor_execute", self._count)

    def _count(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        shape = re.sub(r"\s+", " ", statement).strip()
        shape = re.sub(r"\((?:\?|\$\d+(?:::\w+)?)(?:, (?:\?|\$\d+(?:::\w+)?))*\)", "(...)", shape)
        self.shapes[shape[:100]] += 1

    def stop(self) -> None:
        event.remove(Engine, "before_cursor_execute", self._count)


class Stalls:
    """The longest time the bench's event loop went without a turn (a 0.1 s sleep's overshoot).

    bcd in worker processes keeps real-time keepalives (websockets pings, 20 s): a longer
    stall here closes their sessions, where bcd in this process would have stalled with it.
    """

    def __init__(self) -> None:
        self.longest = 0.0
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.1)
            self.longest = max(self.longest, time.perf_counter() - before - 0.1)

    def stop(self) -> float:
        self._task.cancel()
        return round(self.longest, 2)


def limit_files() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Report(dict[str, Any]):
    """The figures, each printed as soon as it is measured."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        print(f"{key}: {value}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--database", default="sqlite", help="sqlite, or a PostgreSQL URL")
    parser.add_argument("--step", type=float, default=5.0, help="simulated seconds between convergence checks")
    parser.add_argument("--quiet-minutes", type=float, default=10.0)
    parser.add_argument(
        "--bcd-processes",
        type=int,
        default=0,
        help="worker processes running bcd's join and gateway agent; 0 runs the whole bcd in this process",
    )
    parser.add_argument(
        "--max-joins-in-flight",
        type=int,
        default=MAX_JOINS_IN_FLIGHT,
        help="the gateway's cap on joins in flight (the product's default unless given)",
    )
    parser.add_argument(
        "--count-sql", action="store_true", help="count the SQL statements sent from apply to converged, by shape"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(
        bench(
            args.pools,
            args.nodes,
            args.database,
            args.step,
            args.quiet_minutes,
            args.bcd_processes,
            args.max_joins_in_flight,
            args.count_sql,
        )
    )


if __name__ == "__main__":
    main()
