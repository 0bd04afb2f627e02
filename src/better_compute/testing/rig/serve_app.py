"""The Compute a split rig's `better-compute serve` process runs: `--app better_compute.testing.rig.serve_app:compute`.

The world process (testing/rig/world.py) writes a JSON file and names it in
`BC_RIG_FILE`; `compute()` builds from it the same control plane `Cloud.compute`
builds in one process: the gateway (every bcd connects from 127.0.0.1, so the
per-address cap on handshakes is the total cap), vps, kubernetes and fleet over the
real GKE, EKS and DigitalOcean drivers pointed at the world's emulators, bcd's agent
pointed at this serve process (its URL, its certificate's pin and CA), all on a
`FollowedClock` that follows the world's simulated time. With several replicas
(`BC_RIG_REPLICA`), those other than the first sweep stale sessions with a wider
tolerance (`_sweep`).

With `profile` in the file, SIGUSR1 starts cProfile in the serve process (timed by the
process's CPU time, so idle waits and GIL waits cost nothing) and SIGUSR2 stops it and
writes the stats there, so the world can profile just apply -> converged. Between the
two it also counts the SQL statements the process sends, by shape and by the two
innermost product functions that sent them, and writes them beside the stats
(`<profile>.sql.json`, written last); with `cprofile` false it only counts.

Test and benchmark code only.
"""

from __future__ import annotations

import cProfile
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import greenlet  # type: ignore[import-untyped]
from google.oauth2.credentials import Credentials
from sqlalchemy import event
from sqlalchemy.engine import Engine

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet import fleet_module
from better_compute.gateway.module import gateway
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.agent import substrate_agent
from better_compute.providers.aws import AwsCredentials, aws_provider
from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.providers.gcp import gcp_provider
from better_compute.server import Compute, better_compute
from better_compute.testing.gke.identity import SCOPE
from better_compute.testing.rig.clock import FollowedClock
from better_compute.vps import vps

__all__ = ["RIG_FILE", "compute"]

RIG_FILE = "BC_RIG_FILE"
RIG_REPLICA = "BC_RIG_REPLICA"
"""Which replica this serve process is (0, the default, is the one bcd's agent names)."""
_PROFILE: dict[str, cProfile.Profile] = {}
_SQL: Counter[tuple[str, str]] = Counter()


def compute() -> Compute:
    """The control plane the rig file describes; see the module docstring."""
    path = os.environ.get(RIG_FILE)
    if not path:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"{RIG_FILE} names no rig file", f"/{RIG_FILE}")
    rig: dict[str, Any] = json.loads(Path(path).read_text())
    clock = FollowedClock(rig["clock"])
    workers = int(rig.get("max_workers", 16))
    gke, eks, doks, plane = rig["gke"], rig["eks"], rig["doks"], rig["control_plane"]
    credentials = Credentials(  # type: ignore[no-untyped-call]
        token=None,
        refresh_token=gke["refresh_token"],
        token_uri=f"{gke['url']}/token",
        client_id="emulator-client",
        client_secret="emulator-secret",
        scopes=[SCOPE],
    )
    providers = [
        gcp_provider(endpoint=gke["url"], credentials=credentials, max_workers=workers, clock=clock),
        aws_provider(
            endpoint=eks["url"],
            credentials=AwsCredentials(eks["access_key_id"], eks["secret_access_key"]),
            max_workers=workers,
            clock=clock,
        ),
        digitalocean_provider(endpoint=doks["url"], max_workers=workers, clock=clock),
    ]
    agent = substrate_agent(
        image=plane["image"],
        gateway_url=plane["gateway_url"],
        pins=(plane["pin"],),
        control_plane_url=plane["url"],
        ca_pem=plane["ca_pem"],
    )
    if rig.get("profile"):
        _profile_on_signals(Path(rig["profile"]), cpu=bool(rig.get("cprofile", True)))
    return better_compute(
        database=rig["database"],
        secret=rig["secret"],
        clock=clock,
        base_url=plane["url"],
        modules=[
            gateway(
                max_unauthenticated_per_client=int(rig["max_unauthenticated"]),
                max_joins_in_flight=int(rig["max_joins_in_flight"]),
                **_sweep(rig),
            ),
            vps(providers=providers),
            kubernetes(providers=providers, substrate=SubstrateConfig(agent=agent)),
            fleet_module(),
        ],
    )


def _sweep(rig: dict[str, Any]) -> dict[str, int]:
    """A replica other than the first holds no bcd session, and sweeps the sessions the first holds with
    `sweep_missed_heartbeats` (when given) rather than the default 3: the rig's simulated time runs far
    ahead of real time (a 5 s move takes some tens of ms), so another process's heartbeat flush that is
    a fraction of a real second late is 30 simulated seconds late, which no real replica ever sees."""
    replica = int(os.environ.get(RIG_REPLICA, "0"))
    missed = rig.get("sweep_missed_heartbeats")
    return {"missed_heartbeats": int(missed)} if replica > 0 and missed else {}


def _profile_on_signals(path: Path, *, cpu: bool) -> None:
    def start(_signum: int, _frame: FrameType | None) -> None:
        _SQL.clear()
        event.listen(Engine, "before_cursor_execute", _count_sql)
        if cpu:
            profile = cProfile.Profile(time.process_time)  # CPU, not wall: waits for the GIL or a socket cost nothing
            _PROFILE["on"] = profile
            profile.enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profile = _PROFILE.pop("on", None)
        if profile is not None:
            profile.disable()
            written = path.with_name(path.name + ".part")
            profile.dump_stats(str(written))
            written.replace(path)
        if event.contains(Engine, "before_cursor_execute", _count_sql):
            event.remove(Engine, "before_cursor_execute", _count_sql)
            shapes = [{"count": n, "site": site, "shape": shape} for (site, shape), n in _SQL.most_common()]
            written = path.with_name(path.name + ".sql.part")
            written.write_text(json.dumps(shapes, indent=1))
            written.replace(path.with_name(path.name + ".sql.json"))  # whole, or not there yet

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


def _count_sql(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
    shape = re.sub(r"\s+", " ", statement).strip()
    shape = re.sub(r"\((?:\?|\$\d+(?:::\w+)?)(?:, (?:\?|\$\d+(?:::\w+)?))*\)", "(...)", shape)
    _SQL[(_product_site(), shape[:160])] += 1


def _product_site() -> str:
    """The two innermost better_compute functions (outside store/ and testing/) on the sending stack."""
    frame: FrameType | None = sys._getframe(2)
    runner = greenlet.getcurrent()
    sites: list[str] = []
    while len(sites) < 2:
        if frame is None:  # SQLAlchemy's async bridge: the coroutine that spawned this greenlet
            runner = runner.parent
            if runner is None:
                break
            frame = runner.gr_frame
            continue
        name = frame.f_code.co_filename
        if "better_compute" in name and "/store/" not in name and "/testing/" not in name:
            sites.append(f"{name.rpartition('better_compute/')[2]}:{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(sites) or "?"
