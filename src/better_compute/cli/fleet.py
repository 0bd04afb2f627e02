"""`better-compute fleet`: FleetConfig documents from the command line.

    better-compute fleet schema                         the JSON Schema of a document
    better-compute fleet plan FILE [--prune] [--json] [--out PLAN] [--prices PRICES]
    better-compute fleet apply FILE [--prune] [--yes]
    better-compute fleet apply --plan-file PLAN [--yes]

Exit status (see docs/fleet-config.md):

    0    no changes (plan), or applied / nothing to apply (apply)
    1    an error: invalid document, refused apply (blocked, stale plan), answered no
    2    plan only: changes are pending
    3    plan only: the plan has blocked items, so apply would refuse it
    130  Ctrl-C at the [y/N] prompt: nothing was changed

`apply` shows the plan and asks before it writes, unless `--yes`; what it then
applies is exactly the plan it showed (a state that moved meanwhile is refused).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from better_compute.cli.console import err, out
from better_compute.cli.context import tenant_id
from better_compute.cli.errors import json_requested, print_error
from better_compute.cli.prompt import confirm
from better_compute.cli.runner import AppRef, Tenant, with_compute
from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.input import DOCUMENT, decode_json
from better_compute.fleet import Fleet, Plan, json_schema
from better_compute.fleet.prices import PRICES, PriceTable, load_prices, parse_prices
from better_compute.fleet.render import render_error, render_plan
from better_compute.server import Compute

__all__ = ["EXIT_BLOCKED", "EXIT_CHANGES", "EXIT_ERROR", "EXIT_OK", "fleet_app"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_BLOCKED = 3

T = TypeVar("T")

fleet_app = typer.Typer(no_args_is_help=True, help="FleetConfig documents: schema, plan, apply.")

Prune = Annotated[
    bool, typer.Option("--prune", help="Also tear down pools, and substrates, that the document no longer has.")
]


def with_fleet(app_ref: str | None, work: Callable[[Fleet, Compute], Awaitable[T]]) -> T:
    """Run `work` with the Compute's fleet service; a ComputeError is printed, one line per problem, exit 1."""

    async def go(compute: Compute) -> T:
        if "fleet" not in compute.modules:
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                "this Compute has no fleet module: name yours with --app module:attr, built with "
                "modules=[vps(providers=...), fleet_module()] (see examples/compute.py)",
                "/app",
            )
        return await work(compute.fleet, compute)

    return with_compute(app_ref, go, report=_report)


def _report(error: ComputeError) -> None:
    """The error as JSON with --json, else as render_error's lines."""
    if json_requested():
        print_error(error, as_json=True)
    else:
        err.print(render_error(error), soft_wrap=True)


def read_json(path: Path, what: str) -> Any:
    """A JSON file (`-` is stdin) through the input boundary: unreadable, malformed or
    out-of-limits input is INVALID_INPUT, and no more than the byte limit is ever read."""
    limit = DOCUMENT.max_bytes
    try:
        if str(path) == "-":
            stream = getattr(sys.stdin, "buffer", None)  # a test's StringIO stdin has no bytes below it
            raw: bytes | str = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1)
        else:
            with path.open("rb") as file:
                raw = file.read(limit + 1)
    except OSError as exc:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"cannot read {what} {path}: {exc.strerror}") from exc
    return decode_json(raw, limits=DOCUMENT, what=f"{what} {path}")


def _load(path: Path, what: str) -> Any:
    try:
        data = read_json(path, what)
        return Plan.from_dict(data) if what == "plan" else data
    except ComputeError as error:
        _report(error)
        raise typer.Exit(EXIT_ERROR) from None


def _load_prices(path: Path) -> PriceTable:
    """The price table file (YAML or JSON); each problem names the file and its place in it."""
    try:
        try:
            with path.open("rb") as file:
                raw = file.read(PRICES.max_bytes + 1)
        except OSError as exc:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"cannot read the price table {path}: {exc.strerror}") from exc
        return parse_prices(load_prices(raw, what=f"the price table {path}"))
    except ComputeError as error:
        problems = error.problems or (Problem("", str(error)),)
        _report(ComputeError.invalid([Problem(p.path, f"in the price table {path}: {p.message}") for p in problems]))
        raise typer.Exit(EXIT_ERROR) from None


@fleet_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a FleetConfig document."""
    out.print(json_schema(), markup=False, soft_wrap=True)


@fleet_app.command("plan")
def plan(
    file: Annotated[Path, typer.Argument(help="The FleetConfig document (JSON; - for stdin).")],
    prune: Prune = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of text.")] = False,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Save the plan, to apply exactly it with apply --plan-file.")
    ] = None,
    prices_file: Annotated[
        Path | None,
        typer.Option("--prices", help="Your price table (YAML or JSON): show what the changes cost per hour."),
    ] = None,
    tenant: Tenant = None,
    app_ref: AppRef = None,
) -> None:
    """Show what apply would change. Exit 0: no changes, 2: changes pending, 3: blocked, 1: error."""
    document = _load(file, "document")
    prices = _load_prices(prices_file) if prices_file is not None else None

    async def work(fleet: Fleet, compute: Compute) -> Plan:
        return await fleet.plan(document, tenant_id=await tenant_id(compute, tenant), prune=prune, prices=prices)

    result = with_fleet(app_ref, work)
    if out_file is not None:
        out_file.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if as_json:
        out.print(json.dumps(result.to_dict(), indent=2), markup=False, soft_wrap=True)
    else:
        out.print(render_plan(result))
        if out_file is not None:
            out.print(
                f"Saved the plan to {out_file}: apply it with `better-compute fleet apply --plan-file {out_file}`."
            )
    if result.blocked:
        raise typer.Exit(EXIT_BLOCKED)
    raise typer.Exit(EXIT_CHANGES if result.has_changes else EXIT_OK)


@fleet_app.command("apply")
def apply(
    file: Annotated[Path | None, typer.Argument(help="The FleetConfig document (JSON; - for stdin).")] = None,
    prune: Prune = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Apply without asking.")] = False,
    plan_file: Annotated[
        Path | None, typer.Option("--plan-file", help="Apply exactly this saved plan (from plan --out).")
    ] = None,
    tenant_ref: Tenant = None,
    app_ref: AppRef = None,
) -> None:
    """Make the fleet what the document says, in one transaction. Exit 0: applied or nothing to do, 1: error."""
    if file is None and plan_file is None:
        err.print("error: give a FleetConfig document, or a saved plan with --plan-file")
        raise typer.Exit(EXIT_ERROR)
    document = _load(file, "document") if file is not None else None
    saved: Plan | None = _load(plan_file, "plan") if plan_file is not None else None

    async def work(fleet: Fleet, compute: Compute) -> Plan | None:
        tenant = await tenant_id(compute, tenant_ref)
        shown = saved or await fleet.plan(document, tenant_id=tenant, prune=prune)
        out.print(render_plan(shown))
        if shown.blocked or not shown.has_changes:
            # Blocked: apply refuses it with the reasons; no changes: a saved plan still proves the state held.
            if shown.blocked or saved is not None:
                await fleet.apply(document, tenant_id=tenant, prune=prune, plan=shown)
            return None
        if not yes and not confirm("Apply these changes?"):
            out.print("Apply cancelled: nothing was changed.")
            raise typer.Exit(EXIT_ERROR)
        return await fleet.apply(document, tenant_id=tenant, prune=prune, plan=shown)

    applied = with_fleet(app_ref, work)
    if applied is None:
        out.print("Nothing to apply.")
        return
    counts = applied.counts()
    out.print(
        f"Applied: {counts['create']} created, {counts['update']} updated, {counts['delete']} deleted"
        f" ({counts['unchanged']} unchanged, {counts['keep']} kept)."
    )
