"""FleetConfig plan and apply of 1,000 pools across GKE, EKS and DOKS.

A generated document: three sites, three provider accounts (the spec's GKE, EKS and
DOKS accounts) and N pools spread evenly over them, each with a Kubernetes substrate
of one or two flavors. Measured, each on a fresh database:

    plan (create)    validate + plan against an empty fleet
    apply (create)   validate + one transaction writing every site, account, pool and work item
    plan (no-op)     the same document against the state it made
    apply (resize)   every pool's first flavor resized in place
    plan (prune)     half the pools gone from the document, with --prune

Provider vocabulary is checked by the real drivers against their emulators (EKS
reads GPUs from the emulated EC2 once per instance type), or with --providers stub
by the tests' stand-in hook.

    python bench/plan.py --pools 1000 --database sqlite
    python bench/plan.py --pools 1000 --database postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import make_url

from better_compute.compute.changes import ChangeFeed
from better_compute.core.clock import SimClock
from better_compute.fleet.service import Fleet
from better_compute.iam import create_tenant
from better_compute.store import Database
from better_compute.vps.provider import ProviderImpl

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

ACCOUNTS: dict[str, dict[str, Any]] = {
    "gke": {"provider": "gcp", "config": {"projectId": "bench-project", "zones": ["us-central1-a"]}},
    "eks": {
        "provider": "aws",
        "config": json.loads((ROOT / "examples" / "fleet-eks.json").read_text())["providerAccounts"][0]["config"],
    },
    "doks": {"provider": "digitalocean", "config": {"token": "secret://{tenant}/sec_bench", "regions": ["tor1"]}},
}
PLACES = {"gke": "us-central1", "eks": "us-east-1", "doks": "tor1"}
FLAVORS = {
    "gke": [("h100", "a3-highgpu-8g", "nvidia-h100-80gb", 8), ("l4", "g2-standard-4", "nvidia-l4", 1)],
    "eks": [("h100", "p5.48xlarge", "nvidia-h100", 8), ("l4", "g6.xlarge", "nvidia-l4", 1)],
    "doks": [("h100", "gpu-h100x8-640gb", "nvidia-h100", 8), ("h100x1", "gpu-h100x1-80gb", "nvidia-h100", 1)],
}


def document(pools: int, tenant_id: str) -> dict[str, Any]:
    kinds = list(PLACES)
    doc: dict[str, Any] = {
        "version": 1,
        "sites": [{"name": f"{k}-site", "kind": "shared", "region": PLACES[k]} for k in kinds],
        "providerAccounts": [
            {
                "name": f"{k}-account",
                "provider": ACCOUNTS[k]["provider"],
                "config": json.loads(json.dumps(ACCOUNTS[k]["config"]).replace("{tenant}", tenant_id)),
            }
            for k in kinds
        ],
        "pools": [],
    }
    for n in range(pools):
        kind = kinds[n % 3]
        flavors = [
            {"name": name, "machineType": machine, "nodes": 1 + n % 4, "gpus": {"type": gpu, "count": count}}
            for name, machine, gpu, count in FLAVORS[kind][: 1 + n % 2]
        ]
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
                        "account": f"{kind}-account",
                        "cluster": {"create": {"location": PLACES[kind]}},
                        "flavors": flavors,
                    },
                },
            }
        )
    return doc


@asynccontextmanager
async def real_providers(clock: SimClock) -> AsyncIterator[dict[str, ProviderImpl]]:
    from better_compute.testing import Cloud

    async with Cloud(clock) as cloud:
        yield {impl.name: impl for impl in cloud.providers()}


@asynccontextmanager
async def stub_providers() -> AsyncIterator[dict[str, ProviderImpl]]:
    sys.path.insert(0, str(ROOT / "tests" / "fleet"))
    from fleet_stub import stub_providers as stubs

    yield stubs()


@asynccontextmanager
async def fresh_database(target: str) -> AsyncIterator[Database]:
    if target == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
            await db.upgrade()
            try:
                yield db
            finally:
                await db.dispose()
        return
    admin = Database(target)
    name = f"bc_bench_{uuid.uuid4().hex[:8]}"
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    db = Database(make_url(admin.url).set(database=name).render_as_string(hide_password=False))
    try:
        await db.upgrade()
        yield db
    finally:
        await db.dispose()
        async with admin.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


async def timed(label: str, results: dict[str, float], work: Callable[[], Awaitable[T]]) -> T:
    started = time.perf_counter()
    value = await work()
    results[label] = time.perf_counter() - started
    return value


async def measure(target: str, pools: int, providers: dict[str, ProviderImpl], clock: SimClock) -> dict[str, float]:
    results: dict[str, float] = {}
    async with fresh_database(target) as db:
        async with db.transaction() as session:
            tenant_id = (await create_tenant(session, now=clock.now(), name="bench")).id
        fleet = Fleet(db, clock, providers=providers, wake=lambda: None, transaction=ChangeFeed(db).transaction)
        doc = document(pools, tenant_id)
        created = await timed("plan (create)", results, lambda: fleet.plan(doc, tenant_id=tenant_id))
        assert created.counts()["create"] == pools + 6, created.counts()
        await timed("apply (create)", results, lambda: fleet.apply(doc, tenant_id=tenant_id))
        same = await timed("plan (no-op)", results, lambda: fleet.plan(doc, tenant_id=tenant_id))
        assert not same.has_changes
        resized = copy.deepcopy(doc)
        for pool in resized["pools"]:
            pool["policy"]["substrate"]["flavors"][0]["nodes"] += 1
        applied = await timed("apply (resize)", results, lambda: fleet.apply(resized, tenant_id=tenant_id))
        assert applied.counts()["update"] == pools, applied.counts()
        half = copy.deepcopy(resized)
        half["pools"] = half["pools"][: pools // 2]
        pruned = await timed("plan (prune)", results, lambda: fleet.plan(half, tenant_id=tenant_id, prune=True))
        assert pruned.counts()["delete"] == pools - pools // 2
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--database", default="sqlite", help="'sqlite' (a temporary file) or a postgresql:// URL")
    parser.add_argument("--providers", choices=["real", "stub"], default="real")
    args = parser.parse_args()
    clock = SimClock()
    source = real_providers(clock) if args.providers == "real" else stub_providers()
    async with source as providers:
        results = await measure(args.database, args.pools, providers, clock)
    backend = "sqlite" if args.database == "sqlite" else "postgresql"
    for label, seconds in results.items():
        print(f"fleet {label:<15} {args.pools} pools, {backend}, {args.providers} providers: {seconds:.3f} s")


if __name__ == "__main__":
    asyncio.run(main())
