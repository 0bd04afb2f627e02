"""A plan as an operator reads it in a terminal.

    + create   ~ update   - delete   ! blocked   = kept (held back)

Changed fields read `old → new`; unchanged items are only counted. Then each flavor's
`nodes` with what it comes to at its provider (`nodes: 2 per zone x 3 zones = 6`), the Nodes and
bookings the changes disrupt, and with a price table the cost per hour of each change (an
autoscaled flavor's at its bounds, `a to b`), and the providers' quotas for what the changes add,
each quota the change would exceed (or could not read) repeated as a warning above the summary.
The last line sums the plan up. Functions here return rich renderables; only the CLI prints.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.text import Text

from better_compute.core.errors import ComputeError
from better_compute.fleet.cost import Cost, CostLine
from better_compute.fleet.diff import MISSING, Change
from better_compute.fleet.disruption import Disruption
from better_compute.fleet.plan import Action, Plan, PlanItem
from better_compute.fleet.quota import QuotaCheck

__all__ = ["render_error", "render_plan", "summary_line"]

MARKERS: dict[Action, tuple[str, str]] = {
    Action.CREATE: ("+", "green"),
    Action.UPDATE: ("~", "yellow"),
    Action.DELETE: ("-", "red"),
    Action.BLOCKED: ("!", "bold red"),
    Action.KEEP: ("=", "cyan"),
    Action.UNCHANGED: (" ", "dim"),
}
ORDER = {"site": 0, "account": 1, "pool": 2}
LABELS = {"site": "site", "account": "provider account", "pool": "pool"}


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _change(change: Change) -> Text:
    if change.old is MISSING:
        return Text.assemble(("      + ", "green"), f"{change.field}: ", (_value(change.new), "green"))
    if change.new is MISSING:
        return Text.assemble(("      - ", "red"), f"{change.field}: ", (_value(change.old), "red"))
    return Text.assemble(
        ("      ~ ", "yellow"),
        f"{change.field}: ",
        (_value(change.old), "red"),
        " → ",
        (_value(change.new), "green"),
    )


def _item(item: PlanItem) -> list[Text]:
    marker, style = MARKERS[item.action]
    head = Text.assemble((f"  {marker} ", style), (f"{LABELS[item.kind]} ", "bold"), (item.name, f"bold {style}"))
    if item.substrate is not None:
        head.append(f"  (substrate: {item.substrate.value})", "dim")
    lines = [head]
    if item.reason:
        lines.append(Text.assemble(("      blocked: ", "bold red"), item.reason))
    lines.extend(Text.assemble(("      note: ", "cyan"), note) for note in item.notes)
    if item.action is not Action.DELETE:
        lines.extend(_change(c) for c in item.changes)
    return lines


def _disruption(entry: Disruption) -> list[Text]:
    style = "bold red" if entry.bookings == "end" else "yellow" if entry.booked else "dim"
    lines = [Text.assemble(("  ! " if entry.booked else "  - ", style), entry.text())]
    if entry.zones:
        lines.append(
            Text(
                "      Nodes: " + ", ".join(f"{z.zone or 'in total'} {z.before} → {z.after}" for z in entry.zones),
                "dim",
            )
        )
    for node in entry.nodes:
        where = f" ({node.zone})" if node.zone else ""
        held = (
            f"{node.reservations} booking(s), {node.gpus} GPU(s), tenant(s) {', '.join(node.tenants)}"
            if node.booked
            else "free"
        )
        lines.append(Text(f"      {node.name}{where}: {held}", "bold" if node.booked else ""))
    return lines


def _span(values: tuple[float, float], *, signed: bool = False, money: bool = True) -> str:
    def one(value: float) -> str:
        text = f"{value:,.2f}" if money else str(int(value))
        return f"+{text}" if signed and value > 0 else text

    low, high = values
    return one(low) if low == high else f"{one(low)} to {one(high)}"


def _cost_line(line: CostLine, currency: str) -> Text:
    where = f"  {line.pool}/{line.flavor} "
    machine = f"({line.provider} {line.machine_type}{', spot' if line.spot else ''})"
    nodes = f"Nodes {_span(line.before, money=False)} → {_span(line.after, money=False)}"
    before, after, delta = line.per_hour(line.before), line.per_hour(line.after), line.delta
    if before is None or after is None or delta is None:
        return Text.assemble(where, (machine, "dim"), f"  {nodes}; ", ("unpriced: not in the price table", "yellow"))
    style = "red" if delta[1] > 0 else "green" if delta[1] < 0 else ""
    return Text.assemble(
        where,
        (machine, "dim"),
        f"  {nodes}: {_span(before)} → {_span(after)} {currency}/h ",
        (f"({_span(delta, signed=True)})", style),
    )


def _cost(cost: Cost) -> list[Text]:
    lines = [Text(f"Cost per hour of the changes ({cost.currency}, from your price table):", "bold")]
    if not cost.lines:
        lines.append(Text("  no change in Nodes, so none in cost", "dim"))
    lines.extend(_cost_line(line, cost.currency) for line in cost.lines)
    priced = len(cost.lines) - len(cost.unpriced)
    if priced:
        lines.append(Text(f"  total: {_span(cost.delta, signed=True)} {cost.currency}/h", "bold"))
    if cost.unpriced:
        lines.append(
            Text(
                f"  {len(cost.unpriced)} change(s) unpriced and left out of the total: add their machine types",
                "yellow",
            )
        )
    return lines


def _quota(check: QuotaCheck) -> list[Text]:
    where = f"  {check.account} ({check.provider}, {check.place})"
    if check.error is not None:
        return [Text.assemble(("  ! ", "bold yellow"), where.strip(), ": ", (f"not read: {check.error}", "yellow"))]
    if not check.quotas:
        return [Text(f"{where}: no quota the provider reports counts these machines", "dim")]
    lines = [Text(where, "bold")]
    for q in check.quotas:
        total = q.usage + q.adds
        figures = (
            f"{q.name} ({q.metric}{', ' + q.scope if q.scope else ''}): {q.usage:g} in use "
            f"{'+' if q.adds >= 0 else '-'} {abs(q.adds):g} = {total:g} of {q.limit:g} {q.unit}"
        )
        if q.exceeded:
            lines.append(
                Text.assemble(("    ! ", "bold red"), figures, (f": exceeds it by {total - q.limit:g}", "bold red"))
            )
        else:
            lines.append(Text(f"      {figures}"))
    return lines


def summary_line(plan: Plan) -> str:
    counts = plan.counts()
    line = (
        f"Plan: {counts['create']} to create, {counts['update']} to update, {counts['delete']} to delete, "
        f"{counts['blocked']} blocked; {counts['unchanged']} unchanged, {counts['keep']} kept."
    )
    return line


def render_plan(plan: Plan) -> Group:
    """The whole plan: a header, each item that is not unchanged, the summary and what follows from it."""
    header = Text.assemble(
        ("Fleet plan", "bold"),
        f" for tenant {plan.tenant_id} against state {plan.fingerprint[:12]}",
        (" (with --prune)" if plan.prune else " (without --prune)", "dim"),
    )
    lines: list[Text] = [header, Text("")]
    shown = sorted((i for i in plan.items if i.action is not Action.UNCHANGED), key=lambda i: ORDER[i.kind])
    for item in shown:
        lines.extend(_item(item))
    if shown:
        lines.append(Text(""))
    if plan.node_counts:
        lines.append(Text("Nodes each flavor gets at its provider:", "bold"))
        lines.extend(
            Text.assemble(f"  {n.pool}/{n.flavor} ", (f"({n.provider})", "dim"), f"  {n.text()}")
            for n in plan.node_counts
        )
        lines.append(Text(""))
    if plan.disruption:
        lines.append(Text("Nodes and bookings the changes remove or drain:", "bold"))
        for entry in plan.disruption:
            lines.extend(_disruption(entry))
        lines.append(Text(""))
    if plan.cost is not None:
        lines.extend(_cost(plan.cost))
        lines.append(Text(""))
    if plan.quota:
        lines.append(Text("Provider quota for what the changes add (read now):", "bold"))
        for check in plan.quota:
            lines.extend(_quota(check))
        lines.append(Text(""))
    lines.extend(Text.assemble(("Warning: ", "bold yellow"), warning) for warning in plan.warnings)
    lines.append(Text(summary_line(plan), "bold"))
    if plan.blocked:
        lines.append(Text("Apply is refused while any item is blocked.", "bold red"))
    elif not plan.has_changes and plan.counts()["keep"]:
        lines.append(Text("No changes to apply; the kept items change only with --prune (see their notes)."))
    elif not plan.has_changes:
        lines.append(Text("No changes: the fleet matches the document."))
    return Group(*lines)


def render_error(error: ComputeError) -> Text:
    """`error: CODE at /path: message`, one line per problem."""
    if not error.problems:
        return Text(f"error: {error}", "red")
    lines = [f"error: {error.code.value} at {p.path or '/'}: {p.message}" for p in error.problems]
    return Text("\n".join(lines), "red")
