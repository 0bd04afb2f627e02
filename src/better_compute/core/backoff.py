"""The one retry schedule: the engine's delays (engine.schedules) and bcd's reconnects and joins.

A schedule is data: `first * factor**(failures - 1)` seconds, never above `cap`. The engine
waits exactly that (the spec's durations are checked to the second on the simulated clock);
bcd waits a jittered share of it (`jittered`), so a thousand nodes do not come back in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """A geometric schedule: `first * factor**(failures - 1)`, never above `cap`."""

    name: str
    first: float
    factor: float
    cap: float

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th consecutive failure (1-based)."""
        if failures < 1:
            raise ValueError("a delay follows at least one failure")
        # Cap the exponent too, so a very long failure streak cannot overflow a float.
        exponent = min(failures - 1, 64)
        return float(min(self.cap, self.first * self.factor**exponent))

    def jittered(self, failures: int, rng: random.Random) -> float:
        """Equal jitter: between half and all of `delay(failures)`."""
        ceiling = self.delay(failures)
        return ceiling / 2 + rng.uniform(0, ceiling / 2)
