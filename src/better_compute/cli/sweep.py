"""`better-compute sweep [--account NAME] [--delete] [--yes]`: what carries our marks and no record owns.

Without --delete it only lists (and keeps the findings for doctor). With --delete it lists, asks
(unless --yes), then removes what it listed one by one, printing each outcome; exit 1 if one failed.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from better_compute.cli.console import out
from better_compute.cli.errors import EXIT_ERROR
from better_compute.cli.prompt import confirm
from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.ops import sweep as ops_sweep
from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = ["sweep"]

COLUMNS = ["id", "kind", "poolId", "holds"]


def _rows(report: View) -> list[View]:
    return [{**o, "holds": ", ".join(o["holds"])} for o in report["orphans"]]


def _print_report(report: View) -> None:
    print_views(_rows(report), COLUMNS, as_json=False, empty="Nothing of better-compute's is left without a record.")
    for cluster in report["unreachable"]:
        out.print(f"not looked into: {cluster['clusterId']} ({cluster['message']})", markup=False, soft_wrap=True)
    for orphan in report["orphans"]:
        if orphan.get("note"):
            out.print(f"{orphan['id']} {orphan['note']}", markup=False, soft_wrap=True)
    if report.get("otherDeploymentsMessage"):
        out.print(report["otherDeploymentsMessage"], markup=False, soft_wrap=True)


def sweep(
    account: Annotated[str | None, typer.Option("--account", help="Only this provider account (its name).")] = None,
    remove: Annotated[bool, typer.Option("--delete", help="Remove what the sweep finds, after asking.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --delete: remove without asking.")] = False,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """List what carries better-compute's marks at each provider account and in each reachable cluster that no
    record owns (as after a database restored from an older backup); --delete removes it, one by one."""

    async def work(compute: Compute, tid: str) -> dict[str, Any] | None:
        report = await ops_sweep.sweep(compute, tid, account)
        if not remove:
            return report
        if not report["orphans"]:
            return {"deletions": [], "after": report}
        if not as_json:
            _print_report(report)
        if not yes and not confirm(f"Delete these {len(report['orphans'])}?"):
            out.print("Sweep cancelled: nothing was deleted.", markup=False)
            return None
        ids = [o["id"] for o in report["orphans"]]
        return await ops_sweep.delete_orphans(compute, tid, ids, account)

    answer = with_tenant(app_ref, tenant, work)
    if answer is None:
        raise typer.Exit(EXIT_ERROR)
    if as_json:
        print_views(answer, COLUMNS, as_json=True, empty="")
    elif not remove:
        _print_report(answer)
    else:
        for deletion in answer["deletions"]:
            why = f": {deletion['message']}" if deletion["message"] else ""
            out.print(f"{deletion['outcome']} {deletion['id']}{why}", markup=False, soft_wrap=True)
        if not answer["deletions"]:
            out.print("Nothing to delete.", markup=False)
    if any(d["outcome"] == "failed" for d in answer.get("deletions", [])):
        raise typer.Exit(EXIT_ERROR)
