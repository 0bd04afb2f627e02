"""Which failing machines the substrate replaces now, and why the others wait: pure, no I/O.

A Node one of whose GPUs needs a reset or is lost (bcd holds it: issue 28) is replaced at the
provider: that one machine is deleted and the provider makes another in its place. Never while
it holds a booking (nothing is force-released: its tenant keeps the healthy GPUs it booked),
and never more than `PER_HOUR` machines of one pool in any hour, so a fleet whose GPUs flap does
not churn through its machines. There is no share-of-the-pool limit: a pool of one node has its
node replaced. Nodes are taken in name order, so the choice is the same from run to run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from better_compute.compute import Device, gpu_fault

__all__ = ["PER_HOUR", "WINDOW", "Failing", "Replacements", "choose", "described", "needing_reset"]

PER_HOUR = 2
"""At most this many machines of one pool are replaced in any hour (`WINDOW`)."""
WINDOW = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Failing:
    """A Node with a GPU that needs a reset or is lost."""

    name: str
    why: str
    """The GPUs and their faults, as people read them (`GPU-1 (gpu-lost)`)."""
    bookings: int = 0
    """Active reservations on its pool node."""


@dataclass(frozen=True, slots=True)
class Replacements:
    """What this run does with the failing Nodes."""

    now: tuple[Failing, ...]
    """Replace these now."""
    booked: tuple[Failing, ...]
    """Wait for their bookings to end (they are cordoned meanwhile: no new booking lands on them)."""
    limited: tuple[Failing, ...]
    """Free, but the pool has had `PER_HOUR` replacements in the last hour."""
    next_allowed_at: datetime | None = None
    """When the rate limit lets the next one go (set when `limited` is not empty)."""


def choose(
    failing: Iterable[Failing], recent: Iterable[datetime], now: datetime, *, per_hour: int = PER_HOUR
) -> Replacements:
    """`recent`: when this pool's earlier replacements were asked of the provider."""
    ordered = sorted(failing, key=lambda f: f.name)
    free = [f for f in ordered if f.bookings == 0]
    booked = tuple(f for f in ordered if f.bookings > 0)
    window = sorted(at for at in recent if now - at < WINDOW)
    room = max(per_hour - len(window), 0)
    replaced, limited = tuple(free[:room]), tuple(free[room:])
    next_allowed = None
    if limited and per_hour > 0:  # once the oldest of the last `per_hour` (these included) is an hour old
        asked = [*window, *(now for _ in replaced)]
        next_allowed = asked[len(asked) - per_hour] + WINDOW
    return Replacements(replaced, booked, limited, next_allowed)


def needing_reset(devices: Iterable[Device]) -> list[Device]:
    """The GPUs bcd holds until a reset or a reboot (lost, XID 79, 48, pending remaps): their machine is replaced."""
    return [d for d in devices if d.health_state == "reset-needed"]


def described(gpus: Iterable[Device]) -> str:
    """The GPUs and their faults, as people read them: `GPU GPU-1 (gpu-lost, XID 79), GPU GPU-2 (xid, XID 48)`."""
    return ", ".join(f"GPU {d.uuid} ({gpu_fault(d.health_reason, d.health_xid)})" for d in gpus)
