"""`better-compute substrates get POOL` and `better-compute clusters list|get|credentials|...`."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from better_compute.cli.context import load_compute, resolve_tenant
from better_compute.cli.render import error_line
from better_compute.core.errors import ComputeError
from better_compute.kubernetes.router import cluster_dict
from better_compute.server import Compute

__all__ = ["clusters_app", "substrates_app"]

substrates_app = typer.Typer(no_args_is_help=True, help="Kubernetes substrates of GPU pools.")
clusters_app = typer.Typer(no_args_is_help=True, help="Managed Kubernetes clusters.")

AppRef = Annotated[
    str | None, typer.Option("--app", envvar="BC_APP", help="Your Compute as module:attr (default: from BC_* env).")
]
Tenant = Annotated[str | None, typer.Option("--tenant", envvar="BC_TENANT", help="Tenant id.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _run(app_ref: str | None, work: Any) -> Any:
    import asyncio

    async def go() -> Any:
        compute: Compute = load_compute(app_ref)
        try:
            return await work(compute)
        finally:
            await compute.close()

    try:
        return asyncio.run(go())
    except ComputeError as error:
        err.print(error_line(error), markup=False, highlight=False)
        raise typer.Exit(1) from None


@substrates_app.command("get")
def substrates_get(pool: str, tenant: Tenant = None, app_ref: AppRef = None, as_json: Json = False) -> None:
    """The pool's substrate (by pool name or id): state, message, cluster, Nodes listed and joined."""
    view = _run(app_ref, lambda c: c.kubernetes_substrates.get(tenant_id=resolve_tenant(tenant), pool_id=pool))
    data = view.to_dict()
    if as_json:
        out.print_json(json.dumps(data))
        return
    table = Table(title=f"substrate of {data['pool']}", show_header=False)
    cluster = data["cluster"] or {}
    rows = [
        ("state", data["state"]),
        ("message", data["message"] or ""),
        ("mode", data["mode"]),
        (
            "cluster",
            f"{cluster.get('providerClusterId') or cluster.get('name', '')} ({cluster.get('provider', '')}, "
            f"{cluster.get('location', '')}, {cluster.get('status', '')})"
            if cluster
            else "not recorded yet",
        ),
        ("nodes listed", str(len(data["nodesListed"]))),
        ("nodes joined", str(len(data["nodesJoined"]))),
        (
            "waiting to join",
            f"{data['waitingToJoin']['count']}"
            + (f" since {data['waitingToJoin']['since']}" if data["waitingToJoin"]["since"] else ""),
        ),
    ]
    for key, value in rows:
        table.add_row(key, value)
    out.print(table)


@clusters_app.command("list")
def clusters_list(tenant: Tenant = None, app_ref: AppRef = None, as_json: Json = False) -> None:
    """The tenant's clusters, with their node pools."""
    records = _run(app_ref, lambda c: c.kubernetes_clusters.list(tenant_id=resolve_tenant(tenant)))
    data = [cluster_dict(r) for r in records]
    if as_json:
        out.print_json(json.dumps({"clusters": data}))
        return
    table = Table(title="clusters")
    for column in ("id", "name", "provider", "mode", "location", "status", "node pools"):
        table.add_column(column)
    for c in data:
        pools = ", ".join(f"{p['name']}={p['nodes']} ({p['status']})" for p in c["nodePools"])
        table.add_row(c["id"], c["name"], c["provider"], c["mode"], c["location"], c["status"], pools)
    out.print(table)


@clusters_app.command("credentials")
def clusters_credentials(cluster_id: str, tenant: Tenant = None, app_ref: AppRef = None) -> None:
    """Print a kubeconfig with a 600 s admin credential (created clusters only)."""
    text = _run(
        app_ref, lambda c: c.kubernetes_clusters.credentials(tenant_id=resolve_tenant(tenant), cluster_id=cluster_id)
    )
    typer.echo(text, nl=False)
