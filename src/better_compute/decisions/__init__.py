"""The decision log: why each node, GPU and reservation went where it went, as events.

    from better_compute.decisions import Decision, Kind, record

Every decision about a node, a GPU or a reservation (a booking placed, a reservation
preempted, released or ended, a GPU degraded, a node cordoned, retired or replaced), a
join token made, used up or revoked, and a fleet plan applied is written with `record`
in the SAME transaction as the change it explains: it is never lost, and never recorded
for a change that rolled back. Each event names its tenant and the objects it concerns,
and says why in its reason. `read` lists a tenant's events by filter with a cursor;
`compact` deletes those past the retention period (the engine's compaction does it).
"""

from better_compute.decisions.log import Decision, Kind, acting, acting_as, record, recording, suspended
from better_compute.decisions.reading import Cursor, Event, Filters, Page, get, read, recorded_at
from better_compute.decisions.retention import DEFAULT_RETENTION, check_retention, compact

__all__ = [
    "DEFAULT_RETENTION",
    "Cursor",
    "Decision",
    "Event",
    "Filters",
    "Kind",
    "Page",
    "acting",
    "acting_as",
    "check_retention",
    "compact",
    "get",
    "read",
    "record",
    "recorded_at",
    "recording",
    "suspended",
]
