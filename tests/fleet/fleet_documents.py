"""The spec's example documents, and helpers to change one field of a copy."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TENANT = "ten_fleettest"
SECRET = f"secret://{TENANT}/sec_doks"


def example(provider: str, tenant_id: str = TENANT, token: str | None = None) -> dict[str, Any]:
    """examples/fleet-<gke|eks|doks>.json, the DOKS token `token` or a made-up secret of `tenant_id`."""
    text = (EXAMPLES / f"fleet-{provider}.json").read_text()
    text = text.replace("secret://<tenant>/<id>", token or f"secret://{tenant_id}/sec_doks")
    data: dict[str, Any] = json.loads(text)
    return data


def edit(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `document` with the JSON pointer `path` set to `value` (deleted when value is DELETE)."""
    out = copy.deepcopy(document)
    parts = [int(p) if p.isdigit() else p for p in path.strip("/").split("/")]
    target: Any = out
    for part in parts[:-1]:
        target = target[part]
    if value is DELETE:
        del target[parts[-1]]
    elif isinstance(target, list) and parts[-1] == len(target):
        target.append(value)
    else:
        target[parts[-1]] = value
    return out


DELETE: Any = object()
SUBSTRATE = "/pools/0/policy/substrate"


def applied(document: dict[str, Any]) -> Any:
    """The Snapshot a store would hold after applying `document` (ids derived from names)."""
    from better_compute.fleet.plan import pool_record
    from better_compute.fleet.schema import FleetDocument
    from better_compute.fleet.snapshot import AccountState, PoolState, SiteState, Snapshot

    parsed = FleetDocument.model_validate(document)
    return Snapshot.of(
        [SiteState(f"site_{s.name}", s.name, s.kind, s.region) for s in parsed.sites],
        [AccountState(f"acct_{a.name}", a.name, a.provider, dict(a.config)) for a in parsed.provider_accounts],
        [
            PoolState(f"pool_{p.name}", p.name, p.site, p.pool_class, p.gpu_model, pool_record(p)["policy"])
            for p in parsed.pools
        ],
    )
