"""The demo's world: the simulated clouds, a control plane on a SQLite file, and one tenant.

`testing.Cloud` runs GKE, EKS and DOKS with their Kubernetes API and the real bcd in
every bcd pod; the Compute runs on a SQLite file in a temporary directory with the
same providers, the substrate agent pointing bcd at the Cloud's control plane, and
FleetConfig. Its clock is the Cloud's SimClock, started at the real now so that a
CLI command run against a kept world (with the system clock) sees its work as due.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from better_compute.core.clock import SimClock, SystemClock
from better_compute.server import Compute
from better_compute.testing import Cloud

__all__ = ["STEP_SECONDS", "DemoWorld", "default_fleet_path", "open_world"]

STEP_SECONDS = 20.0
"""Simulated seconds per step: the engine runs what falls due, then the emulators catch up."""

TENANT = "demo"
TOKEN_PLACEHOLDER = "secret://<tenant>/<id>"


def default_fleet_path() -> Path:
    """examples/fleet.json in the working directory, else the one in this checkout."""
    here = Path("examples/fleet.json")
    if here.is_file():
        return here
    return Path(__file__).resolve().parents[3] / "examples" / "fleet.json"


@dataclass
class DemoWorld:
    """What the story's steps work on; `document` is the fleet with the DigitalOcean token filled in."""

    cloud: Cloud
    compute: Compute
    directory: Path
    database_url: str
    server_secret: str
    tenant_id: str
    document: dict[str, Any]
    sim_started: datetime
    wall_started: float

    @property
    def sim_elapsed(self) -> timedelta:
        """Simulated time since the world started."""
        return self.cloud.clock.now() - self.sim_started

    @property
    def wall_elapsed(self) -> float:
        """Real seconds since the world started."""
        return time.monotonic() - self.wall_started

    async def step(self, seconds: float = STEP_SECONDS) -> None:
        """Move simulated time on by `seconds`, running what falls due, and let real I/O happen."""
        await self.compute.run_until_idle(until=self.cloud.clock.now() + timedelta(seconds=seconds))
        await self.cloud.settle()
        await asyncio.sleep(0.005)

    def pool_names(self, document: dict[str, Any] | None = None) -> list[str]:
        """The pools of `document` (the fleet's when none)."""
        return [pool["name"] for pool in (document or self.document)["pools"]]

    def provider_of(self, pool_name: str, document: dict[str, Any] | None = None) -> str:
        """The provider of the pool's account (gcp, aws, digitalocean) in `document` (the fleet's when none)."""
        document = document or self.document
        pool = next(p for p in document["pools"] if p["name"] == pool_name)
        account = pool["policy"]["substrate"]["account"]
        return str(next(a["provider"] for a in document["providerAccounts"] if a["name"] == account))

    def write_document(self) -> Path:
        """The filled-in fleet document beside the database, for `fleet plan` against a kept world."""
        path = self.directory / "fleet.json"
        path.write_text(json.dumps(self.document, indent=2) + "\n")
        return path

    async def close(self) -> None:
        """The Cloud first (bcd's sessions end, the control plane stops serving), then the Compute."""
        try:
            await self.cloud.stop()
            await self.compute.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


async def open_world(fleet_text: str) -> DemoWorld:
    """Start the Cloud and a migrated control plane serving at its URL, with the tenant `demo`."""
    wall_started = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="better-compute-demo-"))
    clock = SimClock(SystemClock().now())  # simulated time starts at the wall clock's now
    cloud = Cloud(clock)
    await cloud.start()
    database_url = f"sqlite:///{directory / 'demo.db'}"
    server_secret = secrets.token_urlsafe(32)
    compute = cloud.compute(database_url, server_secret, base_url=cloud.control_plane.url)
    try:
        await compute.migrate()
        tenant = await compute.iam.create_tenant(TENANT)
        token_ref = await compute.secrets.create(tenant.id, cloud.doks_token)
        document: dict[str, Any] = json.loads(fleet_text.replace(TOKEN_PLACEHOLDER, token_ref))
    except BaseException:
        await cloud.stop()
        await compute.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    cloud.serve(compute)
    return DemoWorld(
        cloud, compute, directory, database_url, server_secret, tenant.id, document, clock.now(), wall_started
    )
