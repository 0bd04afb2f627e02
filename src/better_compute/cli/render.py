"""Rendering for the CLI: functions return text or rich renderables; commands print them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from better_compute.core.errors import ComputeError
from better_compute.core.findings import Finding

__all__ = ["cell", "devices_table", "error_line", "findings_table", "views_table"]

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def error_line(err: ComputeError) -> str:
    """`error: CODE at /path: message`, the one line the CLI prints for an error."""
    return f"error: {err}"


def findings_table(findings: Sequence[Finding], *, title: str) -> Table | str:
    if not findings:
        return f"{title}: no findings"
    table = Table(title=title, title_justify="left")
    table.add_column("severity")
    table.add_column("code")
    table.add_column("message", overflow="fold")
    for finding in findings:
        table.add_row(finding.severity, finding.code, finding.message, style=_STYLE[finding.severity])
    return table


def cell(value: Any) -> str:
    """A table cell: mappings as `k=v,...`, booleans as yes/no, None as `-`."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def views_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Table:
    """One row per view, one column per key in `columns` (headed by the key)."""
    table = Table(box=None, pad_edge=False)
    for column in columns:
        table.add_column(column.upper(), overflow="fold", no_wrap=False)
    for row in rows:
        table.add_row(*(cell(row.get(column)) for column in columns))
    return table


DEVICE_COLUMNS = ["index", "uuid", "reservationId", "state", "reason", "xid", "since", "until"]


def devices_table(devices: Sequence[Mapping[str, Any]]) -> Table | str:
    """A node's or a reservation's GPUs (ops.health.device_view), one row each, their health flattened."""
    if not devices:
        return "No GPUs."
    return views_table([{**d, **d["health"]} for d in devices], DEVICE_COLUMNS)
