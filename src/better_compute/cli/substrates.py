"""`better-compute substrates get POOL` and `better-compute clusters list|credentials`.

better-compute substrates get gpu-fleet [--json]   state, message, cluster, Nodes listed and joined
better-compute clusters list [--json]              the tenant's clusters and their node pools
better-compute clusters credentials CLUSTER_ID     a kubeconfig with a 600 s credential (created clusters)
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from better_compute.cli.console import out
from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.kubernetes.router import cluster_dict

__all__ = ["clusters_app", "substrates_app"]

substrates_app = typer.Typer(no_args_is_help=True, help="Kubernetes substrates of GPU pools.")
clusters_app = typer.Typer(no_args_is_help=True, help="Managed Kubernetes clusters.")


def _summary(view: dict[str, Any]) -> dict[str, Any]:
    cluster = view["cluster"] or {}
    waiting = view["waitingToJoin"]
    return {
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


@substrates_app.command("get")
def get(
    pool: Annotated[str, typer.Argument(help="The pool's name or id.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """The pool's substrate: state and message, cluster, Nodes listed and joined. Never a token or credential."""

    async def read(compute: Any, tid: str) -> dict[str, Any]:
        view: dict[str, Any] = (await compute.kubernetes_substrates.get(tenant_id=tid, pool_id=pool)).to_dict()
        return view

    view = with_tenant(app_ref, tenant, read)
    if as_json:
        print_views(view, [], as_json=True, empty="")
        return
    summary = _summary(view)
    print_views(summary, list(summary), as_json=False, empty="")


@clusters_app.command("list")
def list_(tenant: Tenant = None, as_json: Json = False, app_ref: AppRef = None) -> None:
    """The tenant's clusters, with their node pools."""

    async def read(compute: Any, tid: str) -> list[dict[str, Any]]:
        return [cluster_dict(r) for r in await compute.kubernetes_clusters.list(tenant_id=tid)]

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

    async def mint(compute: Any, tid: str) -> str:
        text: str = await compute.kubernetes_clusters.credentials(tenant_id=tid, cluster_id=cluster_id)
        return text

    out.print(with_tenant(app_ref, tenant, mint), markup=False, highlight=False, soft_wrap=True, end="")
