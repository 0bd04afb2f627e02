"""bench/fleet.py's fleet with the control plane apart from the simulated world, in processes of their own.

The control plane is a real `better-compute serve` process (HTTP API, node gateway over
TLS with a pinned key, engine workers) on SQLite or PostgreSQL; this process holds the
simulated world (the GKE, EKS and DOKS emulators, the Kubernetes API emulator and its
kubelet simulators) and drives the simulated clock, which the serve process follows
(testing/rig/). bcd's real join and gateway agent (no device plugin) run in worker
processes (testing/bcd_workers.py), as many as keep each under its open-files limit
unless `--bcd-processes` says. The fleet is applied with `POST /v1/fleet/apply`. It reports:

    cpu            user + system seconds from apply to converged of the serve process alone
                   (from /proc/PID/stat), a Node and a pool; this process (the world and the
                   clock driver) and the bcd workers apart
    wall           from apply to converged; apply -> ready over emulated provisioning per provider
    memory         the serve process's RSS before apply and converged, and per connected Node
    open files     the peak of each process (serve, world, every bcd worker) against its limit
    calls          provider and Kubernetes calls per cluster creation (the serve process's
                   /metrics counters), one full pass once converged, and per converged pool
                   per simulated minute over `--quiet-minutes`, and the serve process's CPU a
                   converged pool a simulated minute over them
    SQL            with `--count-sql` or `--profile`: the serve process's SQL statements from
                   apply to converged, a Node, and the product functions that sent the most
    profile        with `--profile`: cProfile of the serve process from apply to converged,
                   timed by its CPU time: the ten largest own-time costs, in ms of CPU a Node
                   (cProfile slows it: the cpu figures come from runs without it)

    python bench/fleet_split.py --pools 10 --nodes 10
    python bench/fleet_split.py --pools 100 --nodes 10 --profile
    python bench/fleet_split.py --pools 100 --nodes 10 --database postgresql://postgres@127.0.0.1:5432/postgres

With `--replicas N` (PostgreSQL) N serve processes share the database (testing/rig/world.py: bcd
joins and holds its session at the first; the engine work is shared): the cpu figure is their
sum, each replica's is given apart, and so are the reconcile runs each one made, by kind, and the
completions each dropped because an item's lease had passed to the other (stale: 0 means no item
ran on both at once).

    python bench/fleet_split.py --pools 10 --nodes 10 --replicas 2 --database postgresql://postgres@127.0.0.1:5432/postgres

With `--wall-limit S` a run not converged after S seconds of wall stops there and reports how far
it got (pools converged, Nodes joined and connected, simulated minutes, the processes' CPU, RSS and
open files so far), for a size that does not fit the time at hand.

    python bench/fleet_split.py --pools 1000 --nodes 10 --wall-limit 1200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import pstats
import resource
import shutil
import statistics
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from better_compute.gateway.join_limit import MAX_JOINS_IN_FLIGHT
from better_compute.kubernetes.names import CLUSTER_KIND, SUBSTRATE_KIND
from better_compute.kubernetes.tables import SubstrateRow
from better_compute.testing.rig.world import SplitRig, cpu_seconds, open_files, rss_kib
from fleet import KINDS, PROVIDER, Report, document, doks_tokens, fresh_database, progress, provisioned_at

FILES_PER_NODE_IN_A_WORKER = 3
"""A bcd session's TLS socket, with room for its join's connection and the worker's own files."""

Counts = dict[tuple[str, str, str], float]


def since(after: Counts, before: Counts) -> Counts:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def split(calls: Counts) -> dict[str, int]:
    """Provider writes and reads, Kubernetes writes and reads."""
    out = {"provider writes": 0, "provider reads": 0, "kubernetes writes": 0, "kubernetes reads": 0}
    for (api, _method, access), count in calls.items():
        side = "kubernetes" if api == "kubernetes" else "provider"
        out[f"{side} {access}s"] += int(count)
    return out


async def converged(rig: SplitRig, nodes: int) -> dict[str, datetime]:
    """pool id -> when its substrate last recorded `ready`, for the pools ready with every Node joined."""
    async with rig.setup.db.session() as session:
        rows = (await session.scalars(select(SubstrateRow))).all()
    return {r.pool_id: r.updated_at for r in rows if r.state == "ready" and r.nodes_joined == nodes == r.nodes_listed}


def workers_for(total_nodes: int) -> int:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(1, math.ceil(total_nodes * FILES_PER_NODE_IN_A_WORKER / (0.8 * limit)))


async def bench(
    pools: int,
    nodes: int,
    database: str,
    *,
    step: float = 5.0,
    quiet_minutes: float = 10.0,
    bcd_processes: int = 0,
    max_joins: int = MAX_JOINS_IN_FLIGHT,
    profile: bool = False,
    profile_out: Path | None = None,
    count_sql: bool = False,
    hold: float = 120.0,
    replicas: int = 1,
    wall_limit: float = math.inf,
) -> Report:
    report = Report()
    report["pools"], report["nodes per pool"] = pools, nodes
    bcd_processes = bcd_processes or workers_for(pools * nodes)
    report["control plane"] = (
        f"better-compute serve (HTTP API, gateway over TLS with the pin, engine workers) x {replicas}"
    )
    report["bcd"] = f"bcd join + gateway agent (no device plugin) in {bcd_processes} worker processes"
    report["database"] = database.split("@")[-1]
    with tempfile.TemporaryDirectory() as tmp:
        stats_path = Path(tmp) / "serve.prof" if profile or count_sql else None
        async with (
            fresh_database(database) as url,
            SplitRig(
                url,
                bcd_processes=bcd_processes,
                max_joins_in_flight=max_joins,
                step=step,
                hold=hold,
                profile=stats_path,
                cprofile=profile,
                replicas=replicas,
            ) as rig,
        ):
            await _run(rig, report, pools, nodes, quiet_minutes, wall_limit)
        if stats_path is not None and stats_path.exists():
            report["serve profile, apply -> converged: the 10 largest own times, ms a Node (cumulative ms a Node)"] = (
                top_costs(stats_path, pools * nodes)
            )
            if profile_out is not None:
                shutil.copyfile(stats_path, profile_out)
        if stats_path is not None:
            report_sql(report, Path(f"{stats_path}.sql.json"), pools * nodes, profile_out)
    return report


async def _run(rig: SplitRig, report: Report, pools: int, nodes: int, quiet_minutes: float, wall_limit: float) -> None:
    refs = [await rig.secret(token) for token in doks_tokens(rig.cloud, pools)]
    doc = document(pools, nodes, refs)
    serves = (
        {"serve": rig.serve_pid}
        if len(rig.serve_pids) == 1
        else {f"serve {i}": pid for i, pid in enumerate(rig.serve_pids)}
    )
    pids = serves | {"world": _self_pid()} | {f"bcd worker {i}": pid for i, pid in enumerate(rig.worker_pids)}
    peak = {name: open_files(pid) for name, pid in pids.items()}
    rss_before = rss_kib(rig.serve_pid)
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    before = await rig.metrics()
    applied_at = rig.clock.now()
    started = time.perf_counter()
    async with rig.profiling():
        plan = await rig.apply(doc)
        report["apply answered (s)"] = round(time.perf_counter() - started, 2)
        del plan
        kind_of = await _kinds(rig)
        ready: dict[str, datetime] = {}
        per_kind: dict[str, float] = {}
        progress_at = time.perf_counter() + 30
        while len(ready) < pools and time.perf_counter() - started < wall_limit:
            await rig.step_until(rig.clock.now() + timedelta(seconds=rig.step))
            for name, pid in pids.items():
                peak[name] = max(peak[name], open_files(pid))
            for pool_id, at in (await converged(rig, nodes)).items():
                ready.setdefault(pool_id, at)
            for kind in KINDS:
                mine = [p for p, k in kind_of.items() if k == kind]
                if kind not in per_kind and mine and all(p in ready for p in mine):
                    calls = since(await rig.metrics(), before)
                    reads = sum(
                        v for (api, _m, access), v in calls.items() if api == PROVIDER[kind] and access == "read"
                    )
                    per_kind[kind] = reads / len(mine)
            progress_at = progress(progress_at, started, rig.clock.now() - applied_at, len(ready), pools)
        wall = time.perf_counter() - started
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    cpu["serve"] = sum(cpu[name] for name in serves)
    total_nodes = pools * nodes
    report["wall to converge (s)"] = round(wall, 2)
    report["wall per pool (ms)"] = round(1000 * wall / pools, 1)
    report["simulated minutes to converge"] = round((rig.clock.now() - applied_at).total_seconds() / 60, 1)
    report["steps held past the hold for a quiet control plane"] = rig.held_too_long
    report["control plane cpu to converge (s)"] = round(cpu["serve"], 2)
    report["control plane cpu a Node, a pool (ms)"] = (
        round(1000 * cpu["serve"] / total_nodes, 2),
        round(1000 * cpu["serve"] / pools, 1),
    )
    if len(serves) > 1:
        report["control plane cpu to converge by replica (s)"] = {name: round(cpu[name], 2) for name in serves}
    report["world + clock driver cpu to converge (s)"] = round(cpu["world"], 2)
    report["bcd workers cpu to converge (s)"] = round(sum(v for k, v in cpu.items() if k.startswith("bcd")), 2)
    connected = await rig.connected()
    rss_after = rss_kib(rig.serve_pid)
    report["serve RSS before apply, converged (MiB)"] = (round(rss_before / 1024, 1), round(rss_after / 1024, 1))
    report["serve RSS per connected Node (KiB)"] = round((rss_after - rss_before) / max(1, connected), 1)
    report["connected Nodes"] = connected
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    report[f"peak open files per process (limit {limit} each)"] = peak
    if len(ready) < pools:
        report[f"stopped at the wall limit ({wall_limit:g} s): pools converged, Nodes joined"] = (
            len(ready),
            len(rig.cloud.bcd.joined),
        )
        return
    creation = since(await rig.metrics(), before)
    clusters_made = sum(v for (_a, method, _x), v in creation.items() if method == "ensure_cluster")
    made = max(1.0, clusters_made)
    calls = split(creation)
    report["calls to converge"] = calls
    report["per cluster creation: provider reads, provider writes, kubernetes reads, kubernetes writes"] = tuple(
        round(calls[k] / made, 1)
        for k in ("provider reads", "provider writes", "kubernetes reads", "kubernetes writes")
    )
    report["provider reads per cluster creation, by provider (until its last pool converged)"] = {
        k: round(v, 1) for k, v in per_kind.items()
    }
    provisioned = provisioned_at(rig.cloud)
    ratios: dict[str, list[float]] = {k: [] for k in KINDS}
    for pool_id, at in ready.items():
        emulated = (provisioned[pool_id] - applied_at).total_seconds()
        ratios[kind_of[pool_id]].append((at - applied_at).total_seconds() / emulated)
    report["apply->ready / emulated provisioning, by provider (median, max)"] = {
        k: (round(statistics.median(v), 3), round(max(v), 3)) for k, v in ratios.items() if v
    }
    report["reconcile runs to converge by replica, by kind; stale completions"] = await _runs(rig)
    before = await rig.metrics()
    await rig.full_pass((SUBSTRATE_KIND, CLUSTER_KIND))
    report["one full pass once converged"] = split(since(await rig.metrics(), before))
    before = await rig.metrics()
    cpu_quiet = sum(cpu_seconds(pid) for pid in rig.serve_pids)
    await rig.step_until(rig.clock.now() + timedelta(minutes=quiet_minutes))
    cpu_quiet = sum(cpu_seconds(pid) for pid in rig.serve_pids) - cpu_quiet
    quiet = split(since(await rig.metrics(), before))
    report[f"over {quiet_minutes:g} converged minutes"] = quiet
    if quiet_minutes > 0:
        report["control plane cpu a converged pool a simulated minute (ms)"] = round(
            1000 * cpu_quiet / pools / quiet_minutes, 2
        )
    report[
        "calls per converged pool per minute (provider reads, provider writes, kubernetes reads, kubernetes writes)"
    ] = tuple(
        round(quiet[k] / pools / quiet_minutes, 3)
        for k in ("provider reads", "provider writes", "kubernetes reads", "kubernetes writes")
    )
    report["reconcile runs to the end by replica, by kind; stale completions"] = await _runs(rig)
    cpu_end = {name: round(cpu_seconds(pid) - cpu_before[name], 2) for name, pid in serves.items()}
    report["control plane cpu apply to the end by replica (s)"] = cpu_end


async def _runs(rig: SplitRig) -> dict[str, dict[str, float]]:
    """Replica -> reconcile runs by kind (every result), and `stale`: completions it dropped."""
    out: dict[str, dict[str, float]] = {}
    for replica in range(len(rig.serve_pids)):
        runs: dict[str, float] = {}
        for (kind, result), count in (await rig.runs_of(replica)).items():
            key = "stale" if result == "stale" else kind
            runs[key] = runs.get(key, 0.0) + count
        runs.setdefault("stale", 0.0)
        out[f"serve {replica}"] = runs
    return out


async def _kinds(rig: SplitRig) -> dict[str, str]:
    """pool id -> gke, eks or doks (the account's name says which)."""
    assert rig.http is not None
    answer = await rig.http.get("/v1/pools")
    answer.raise_for_status()
    pools: list[dict[str, Any]] = answer.json()
    return {pool["id"]: pool["policy"]["substrate"]["account"].split("-")[0] for pool in pools}


def top_costs(path: Path, total_nodes: int) -> list[str]:
    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, name), (_cc, _nc, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tottime, cumtime, f"{Path(filename).name}:{line}({name})"))
    rows.sort(reverse=True)
    return [f"{1000 * own / total_nodes:.3f} ({1000 * cum / total_nodes:.3f}) {where}" for own, cum, where in rows[:10]]


def report_sql(report: Report, counted: Path, total_nodes: int, keep: Path | None) -> None:
    """The serve process's statements a Node, and the ten product functions that sent the most."""
    if not counted.exists():
        return
    shapes: list[dict[str, Any]] = json.loads(counted.read_text())
    by_site: Counter[str] = Counter()
    for shape in shapes:
        by_site[shape["site"]] += shape["count"]
    report["serve SQL statements, apply -> converged: a Node"] = round(sum(by_site.values()) / total_nodes, 1)
    report["the 10 product functions sending the most, statements a Node"] = [
        f"{n / total_nodes:.2f} {site}" for site, n in by_site.most_common(10)
    ]
    if keep is not None:
        shutil.copyfile(counted, f"{keep}.sql.json")


def _self_pid() -> int:
    return os.getpid()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--database", default="sqlite", help="sqlite, or a PostgreSQL URL")
    parser.add_argument("--step", type=float, default=5.0, help="simulated seconds a clock move at most")
    parser.add_argument("--quiet-minutes", type=float, default=10.0)
    parser.add_argument("--bcd-processes", type=int, default=0, help="bcd worker processes (default: by open files)")
    parser.add_argument("--max-joins-in-flight", type=int, default=MAX_JOINS_IN_FLIGHT)
    parser.add_argument("--hold", type=float, default=120.0, help="real seconds a step waits for a quiet control plane")
    parser.add_argument("--profile", action="store_true", help="cProfile the serve process from apply to converged")
    parser.add_argument("--count-sql", action="store_true", help="count the serve process's SQL statements by sender")
    parser.add_argument(
        "--profile-out", type=Path, help="keep the serve process's pstats file (and its SQL counts, .sql.json) here"
    )
    parser.add_argument("--replicas", type=int, default=1, help="serve processes on one PostgreSQL database")
    parser.add_argument(
        "--wall-limit", type=float, default=math.inf, help="real seconds after which an unconverged run stops"
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
            step=args.step,
            quiet_minutes=args.quiet_minutes,
            bcd_processes=args.bcd_processes,
            max_joins=args.max_joins_in_flight,
            profile=args.profile,
            profile_out=args.profile_out,
            count_sql=args.count_sql,
            hold=args.hold,
            replicas=args.replicas,
            wall_limit=args.wall_limit,
        )
    )


if __name__ == "__main__":
    main()
