"""What the demo shows: step headings, plans, a live table of the substrates, and tables of results.

Everything fits 100 columns. On a terminal the substrate table redraws in place while
simulated time runs; in a file or a CI log (docs/demo.txt) each change of a substrate is
one line, stamped with the simulated time, and the table is printed once when the wait
ends. `Display(None)` shows nothing (`--json`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from better_compute.fleet import Plan
from better_compute.fleet.render import render_plan

__all__ = ["WIDTH", "Display", "SubstrateRow", "duration"]

WIDTH = 100
"""The widest the demo draws, whatever the terminal."""


def duration(elapsed: timedelta | float) -> str:
    """`1h 02m 05s`, `4m 10s` or `12.3s`."""
    seconds = elapsed.total_seconds() if isinstance(elapsed, timedelta) else elapsed
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


SubstrateRow = tuple[str, str, str, str, int, int, str]
"""pool, provider, substrate state, cluster status, Nodes listed, Nodes joined, message."""

STATE_STYLE = {"ready": "green", "failed": "red", "degraded": "yellow", "deleted": "dim"}


class Display:
    """See the module docstring."""

    def __init__(self, console: Console | None) -> None:
        self.console = console

    def print(self, *renderables: RenderableType) -> None:
        if self.console is not None:
            self.console.print(Group(*renderables))

    def title(self, text: str, lines: Sequence[str]) -> None:
        self.print(Text(text, "bold"), *(Text(line) for line in lines))

    def step(self, number: str, title: str, explanation: str) -> None:
        """A step's heading and a sentence saying what is about to happen."""
        self.print(Text(""), Text.assemble((f"Step {number}. ", "bold cyan"), (title, "bold")), Text(explanation))

    def note(self, text: str, style: str = "") -> None:
        self.print(Text(text, style))

    def plan(self, plan: Plan, document_name: str) -> None:
        """The plan exactly as `better-compute fleet plan` prints it."""
        prune = " --prune" if plan.prune else ""
        self.print(Text(f"$ better-compute fleet plan {document_name}{prune}", "dim"), render_plan(plan))

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, header: bool = True) -> None:
        table = Table(
            title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False, show_header=header
        )
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(str(cell) for cell in row))
        self.print(table)

    @contextmanager
    def live(self) -> Iterator[LiveSubstrates]:
        """A substrate table that redraws in place on a terminal (see LiveSubstrates.update)."""
        if self.console is None:
            yield LiveSubstrates(None)
        elif not self.console.is_terminal:
            lines = ChangeLines(self.console)
            yield lines
            lines.finish()
        else:
            with Live(console=self.console, auto_refresh=False, transient=False) as live:
                yield LiveSubstrates(live)


class LiveSubstrates:
    """The live part of a step: one row per pool's substrate, and the simulated and wall time."""

    def __init__(self, live: Live | None) -> None:
        self.live = live

    def update(self, rows: Sequence[SubstrateRow], *, simulated: timedelta, wall: float, waiting_for: str) -> None:
        if self.live is None:
            return
        self.live.update(substrate_table(rows, simulated=simulated, wall=wall, waiting_for=waiting_for), refresh=True)


class ChangeLines(LiveSubstrates):
    """Off a terminal: a line per substrate whose state, cluster or Node counts changed, then the last table."""

    def __init__(self, console: Console) -> None:
        super().__init__(None)
        self.console = console
        self.seen: dict[str, SubstrateRow] = {}
        self.last: RenderableType | None = None

    def update(self, rows: Sequence[SubstrateRow], *, simulated: timedelta, wall: float, waiting_for: str) -> None:
        if self.last is None:
            self.console.print(Text.assemble(("waiting for: ", "dim"), waiting_for))
        for row in rows:
            before = self.seen.get(row[0])
            if before is None or before[2:6] != row[2:6]:
                pool, _, state, cluster, listed, joined, message = row
                stamp = f"+{duration(simulated)}".rjust(9)
                line = f"{stamp}  {pool:<11} {state:<12} cluster {cluster or '-':<12} {joined}/{listed} Nodes joined"
                self.console.print(
                    line + (f"  {message}" if message else ""), no_wrap=True, overflow="ellipsis", markup=False
                )
            self.seen[row[0]] = row
        self.last = substrate_table(rows, simulated=simulated, wall=wall, waiting_for=waiting_for)

    def finish(self) -> None:
        if self.last is not None:
            self.console.print(self.last)


def substrate_table(
    rows: Sequence[SubstrateRow], *, simulated: timedelta, wall: float, waiting_for: str
) -> RenderableType:
    """One row per pool's substrate, then the simulated and wall time and what the step waits for."""
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for column, justify in (
        ("pool", "left"),
        ("provider", "left"),
        ("substrate", "left"),
        ("cluster", "left"),
        ("listed", "right"),
        ("joined", "right"),
        ("message", "left"),
    ):
        table.add_column(column, justify=justify, overflow="ellipsis", no_wrap=column == "message")  # type: ignore[arg-type]
    for pool, provider, state, cluster, listed, joined, message in rows:
        table.add_row(
            pool,
            provider,
            Text(state, STATE_STYLE.get(state, "yellow")),
            cluster,
            str(listed),
            str(joined),
            message,
        )
    clock = Text.assemble(
        ("simulated time ", "dim"),
        (f"+{duration(simulated)}", "bold"),
        ("  wall time ", "dim"),
        (duration(wall), "bold"),
        ("  waiting for: ", "dim"),
        waiting_for,
    )
    return Group(table, clock)
