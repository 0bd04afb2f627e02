"""One run of the demo: open the world, tell the story, fill in the summary, and keep or close."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from better_compute.demo.display import Display, duration
from better_compute.demo.keep import environment, example_commands, serve_until_stopped, shell_lines
from better_compute.demo.story import KEEP_STEP, STEPS, Story
from better_compute.demo.summary import Summary, calls_by_api
from better_compute.demo.world import open_world
from better_compute.kubernetes.calls import CALLS

__all__ = ["run_demo"]

INTRO = (
    "Everything below runs for real on this machine: the GKE, EKS and DOKS APIs are emulators that",
    "speak their wire formats, each cluster has a Kubernetes API, and every Node runs the real bcd.",
    "The control plane runs on a SQLite file in a temporary directory.",
)


async def run_demo(
    display: Display, fleet_text: str, *, keep: bool = False, on_kept: Callable[[Summary], None] | None = None
) -> Summary:
    """Tell the story; with `keep`, bring the fleet up again and serve until SIGINT/SIGTERM.

    `on_kept` is called with the summary (its `kept` holds the environment) once the world
    is ready to be used, before serving.
    """
    wall_started = time.monotonic()
    before = CALLS.snapshot()
    summary = Summary()
    display.title("better-compute demo: GPU pools on GKE, EKS and DOKS", INTRO)
    world = await open_world(fleet_text)
    try:
        display.note(f"Control plane: {world.cloud.control_plane.url}", "dim")
        display.note(f"Database: {world.database_url}", "dim")
        story = Story(world, display, summary)
        for number, title, explanation, step in STEPS:
            display.step(number, title, explanation)
            await step(story)
        summary.bcd_joins = world.cloud.bcd.joins
        summary.provider_calls = calls_by_api(CALLS.since(before))
        summary.simulated_seconds = world.sim_elapsed.total_seconds()
        summary.wall_seconds = time.monotonic() - wall_started
        show_summary(display, summary)
        if keep:
            number, title, explanation, step = KEEP_STEP
            display.step(number, title, explanation)
            await step(Story(world, display, Summary()))  # the summary stays the story's
            summary.kept = await environment(world)
            show_kept(display, summary.kept)
            if on_kept is not None:
                on_kept(summary)
            await serve_until_stopped(world)
    finally:
        await world.close()
    return summary


def show_summary(display: Display, summary: Summary) -> None:
    made = summary.made()
    left = summary.left_after_prune or {}
    rows = [
        ("pools ready", ", ".join(f"{n} ({p.provider})" for n, p in summary.pools.items() if p.ready)),
        ("clusters created", str(made["clusters"])),
        ("Nodes joined (bcd joins)", f"{made['nodesJoined']} ({made['bcdJoins']})"),
        ("reservations", f"{len(summary.reservations)} booked, {len(summary.preemptions)} preempted by a Spot reclaim"),
        ("scaled", ", ".join(f"{s['pool']} to {s['nodes']}" for s in summary.scaled)),
        ("adopted", adopted_line(summary.adopted)),
        ("left after prune", ", ".join(f"{k}: {v}" for k, v in left.items())),
        *(
            (f"{api} calls", f"{counts['reads']} reads, {counts['writes']} writes")
            for api, counts in summary.provider_calls.items()
        ),
        ("simulated time", duration(summary.simulated_seconds)),
        ("wall time", duration(summary.wall_seconds)),
    ]
    display.print()
    display.table("Summary", ["", ""], rows, header=False)


def adopted_line(adopted: dict[str, Any] | None) -> str:
    """The adopted cluster, and whether it and its owner's node pools were kept through the prune."""
    if not adopted:
        return "none"
    after = adopted.get("afterPrune", {})
    kept = "kept" if after.get("clusterKept") and after.get("ownerPoolsKept") else "NOT kept"
    return f"{adopted['cluster']} ({', '.join(adopted['ownerPools'])}): {kept} after the prune"


def show_kept(display: Display, variables: dict[str, str]) -> None:
    display.print()
    display.note("Kept: the control plane and the emulators keep serving until Ctrl-C. In another shell:", "bold")
    for line in shell_lines(variables):
        display.note(line)
    for command in example_commands():
        display.note(f"$ {command}", "cyan")
