"""The substrate's lifecycle as a timeline: its recorded state changes laid out on one time axis.

Pure: the decision log's `substrate.state-changed` events (oldest first, as GET /v1/events
answers them) and the clock's now give one segment a state, from its change to the next one
(the last to now), each placed as a share of the axis for the pool page's SVG. The page lists
the same changes as text beside the picture, so nothing is told by the picture alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from better_compute.ops.views import View

__all__ = ["WIDTH", "Segment", "Timeline", "timeline"]

WIDTH = 1000.0
"""The SVG's width in its own units (it scales to the page)."""
MOMENT = 3.0
"""The narrowest a segment is drawn: a state held for a moment still shows."""
MIN_LABEL = 70.0
"""A segment narrower than this carries no label in the picture (the list beside it names it)."""


@dataclass(frozen=True)
class Segment:
    state: str
    start: datetime
    end: datetime
    message: str | None
    x: float
    width: float

    @property
    def labelled(self) -> bool:
        return self.width >= MIN_LABEL


@dataclass(frozen=True)
class Timeline:
    segments: list[Segment]
    changes: list[dict[str, Any]]
    """Each change as the list shows it: at, from, to, message."""
    start: datetime | None
    now: datetime

    @property
    def summary(self) -> str:
        """The picture in one sentence, for its accessible name."""
        if not self.segments:
            return "No state changes recorded yet."
        path = ", then ".join(s.state for s in self.segments)
        return f"The substrate was {path} (now {self.segments[-1].state})."


def timeline(events: list[View], now: datetime) -> Timeline:
    """The segments between the recorded changes (events oldest first), the last one running to `now`."""
    changes = [
        {
            "at": datetime.fromisoformat(e["at"]),
            "from": e["details"].get("from"),
            "to": e["details"].get("to"),
            "message": e["details"].get("message"),
        }
        for e in events
    ]
    if not changes:
        return Timeline([], [], None, now)
    start = changes[0]["at"]
    span = max((now - start).total_seconds(), 1.0)
    segments = []
    for change, after in zip(changes, [*changes[1:], None], strict=True):
        end = after["at"] if after is not None else now
        x = min((change["at"] - start).total_seconds() / span * WIDTH, WIDTH - MOMENT)
        width = max((end - change["at"]).total_seconds() / span * WIDTH, MOMENT)
        segments.append(Segment(str(change["to"]), change["at"], end, change["message"], x, min(width, WIDTH - x)))
    return Timeline(segments, changes, start, now)
