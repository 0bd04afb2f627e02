"""Reconnect delays: exponential with jitter, so a thousand nodes do not come back in step."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Equal jitter: attempt n waits between half and all of min(cap, base * 2**n) seconds."""

    def __init__(self, *, base: float = 1.0, cap: float = 60.0, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()
        self.attempt = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt = min(self.attempt + 1, 32)
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0
