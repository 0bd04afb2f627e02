"""`better-compute substrates get POOL` and `better-compute clusters list|credentials`.

better-compute substrates get gpu-fleet [--json]   state, message, cluster, Nodes listed and joined, each step
better-compute clusters list [--json]              the tenant's clusters and their node pools
better-compute clusters credentials CLUSTER_ID     a kubeconfig with a 600 s credential (created clusters)
better-compute clusters upgrade CLUSTER_ID --version 1.32 [--json]   upgrade, draining nodes one at a time
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from better_compute.cli.console import out
from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.ops import clusters
from better_compute.server import Compute

__all__ = ["clusters_app", "substrates_app"]

substrates_app = typer.Typer(no_args_is_help=True, help="Kubernetes substrates of GPU pools.")
clusters_app = typer.Typer(no_args_is_help=True, help="Managed Kubernetes clusters.")


def _summary(view: dict[str, Any]) -> dict[str, Any]:
    cluster = view["cluster"] or {}
    waiting = view["waitingToJoin"]
    summary = {
        "pool": view["pool"],
        "state": view["state"],
        "mode": view["mode"],
        "cluster": cluster.get("providerClusterId") or cluster.get("name") or "",
        "provider": cluster.get("provider", ""),
        "clusterStatus": cluster.get("status", ""),
        "listed": len(view["nodesListed"]),
        "joined": len(view["nodesJoined"]),
        "waiting": waiting["count"],
        "message": view["message"] or "",
        "nextAttempt": view.get("nextAttemptAt") or "",
    }
    upgrade = view.get("upgrade")
    if upgrade:
        summary["upgrade"] = (
            f"{upgrade['from']} -> {upgrade['to']}: {len(upgrade['nodesDone'])} done, "
            f"{len(upgrade['nodesDraining'])} draining, {len(upgrade['nodesWaiting'])} waiting"
            + (f" ({upgrade['message']})" if upgrade.get("message") else "")
        )
    return summary


def _steps(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Each step's condition as the last run left it, one row a step, in the run's order."""
    return [
        {"step": c["name"], "status": c["status"], "since": c.get("since") or "", "message": c.get("message") or ""}
        for c in view.get("conditions") or []
    ]


@substrates_app.command("get")
def get(
    pool: Annotated[str, typer.Argument(help="The pool's name (the live pool's, else the one archived last) or id.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """The pool's substrate: state and message, cluster, Nodes listed and joined. Never a token or credential.
    An archived pool's (its teardown's `deleted`) is read by its name until another pool takes it, then by its id."""

    async def read(compute: Compute, tid: str) -> dict[str, Any]:
        return await clusters.get_substrate(compute, tid, pool)

    view = with_tenant(app_ref, tenant, read)
    if as_json:
        print_views(view, [], as_json=True, empty="")
        return
    summary = _summary(view)
    print_views(summary, list(summary), as_json=False, empty="")
    steps = _steps(view)
    if steps:
        print_views(steps, list(steps[0]), as_json=False, empty="")


@clusters_app.command("list")
def list_(tenant: Tenant = None, as_json: Json = False, app_ref: AppRef = None) -> None:
    """The tenant's clusters, with their node pools."""

    async def read(compute: Compute, tid: str) -> list[dict[str, Any]]:
        return await clusters.list_clusters(compute, tid)

    views = with_tenant(app_ref, tenant, read)
    if not as_json:
        for view in views:
            view["nodePools"] = ", ".join(f"{p['name']}={p['nodes']} ({p['status']})" for p in view["nodePools"])
    columns = ["id", "name", "provider", "mode", "location", "status", "nodePools"]
    print_views(views, columns, as_json=as_json, empty="No clusters: apply a pool with policy.substrate.")


@clusters_app.command("credentials")
def credentials(
    cluster_id: Annotated[str, typer.Argument(help="The cluster's id (see `clusters list`).")],
    tenant: Tenant = None,
    app_ref: AppRef = None,
) -> None:
    """Print a kubeconfig with a 600 s admin credential (created clusters only; adopted ones are refused)."""

    async def mint(compute: Compute, tid: str) -> str:
        return await clusters.cluster_credentials(compute, tid, cluster_id)

    out.print(with_tenant(app_ref, tenant, mint), markup=False, highlight=False, soft_wrap=True, end="")


@clusters_app.command("upgrade")
def upgrade(
    cluster_id: Annotated[str, typer.Argument(help="The cluster's id (see `clusters list`).")],
    version: Annotated[str, typer.Option("--version", help="A version the provider offers, such as 1.32.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Upgrade a created cluster: the control plane, then each node pool, draining its nodes one at a time.

    Nothing is force-released: a node waits cordoned until its bookings end. `substrates get POOL` shows
    the drain. Asking again for the same version is a no-op."""

    async def start(compute: Compute, tid: str) -> dict[str, Any]:
        return await clusters.upgrade_cluster(compute, tid, cluster_id, version)

    view = with_tenant(app_ref, tenant, start)
    if not as_json:
        view["nodePools"] = ", ".join(f"{p['name']}={p['nodes']} ({p['status']})" for p in view["nodePools"])
    print_views(view, ["id", "name", "provider", "status", "version", "upgradingTo"], as_json=as_json, empty="")
