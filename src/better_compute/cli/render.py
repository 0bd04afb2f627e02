"""Rendering for the CLI: functions return text or rich renderables; commands print them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from better_compute.core.errors import ComputeError
from better_compute.core.findings import Finding

__all__ = ["error_line", "findings_table"]

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
