"""DigitalOcean's API rate limits on the simulated clock: 5,000 requests an hour and 250 a minute per token.

Every answer carries `ratelimit-limit`, `ratelimit-remaining` and `ratelimit-reset`
(the Unix time at which the oldest request of the hour window stops counting); a
refused request also carries `retry-after`, the seconds until a request would be
let through again.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["RateLimiter", "Verdict"]

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    headers: dict[str, str]


class RateLimiter:
    """Sliding windows of one token's requests."""

    def __init__(self, per_hour: int = 5000, per_minute: int = 250) -> None:
        self.per_hour = per_hour
        self.per_minute = per_minute
        self._seen: dict[str, deque[datetime]] = {}

    def check(self, token: str, now: datetime, *, force_refuse: bool = False) -> Verdict:
        """Count one request of `token` at `now`, unless it is refused (refused requests do not count)."""
        seen = self._seen.setdefault(token, deque())
        while seen and seen[0] <= now - HOUR:
            seen.popleft()
        in_minute = [t for t in seen if t > now - MINUTE]
        waits: list[float] = []
        if len(seen) >= self.per_hour:
            waits.append((seen[len(seen) - self.per_hour] + HOUR - now).total_seconds())
        if len(in_minute) >= self.per_minute:
            waits.append((in_minute[len(in_minute) - self.per_minute] + MINUTE - now).total_seconds())
        if force_refuse:
            waits.append(1.0)
        allowed = not waits
        if allowed:
            seen.append(now)
        reset_at = (seen[0] + HOUR) if seen else now
        headers = {
            "ratelimit-limit": str(self.per_hour),
            "ratelimit-remaining": str(max(0, self.per_hour - len(seen))),
            "ratelimit-reset": str(math.ceil(reset_at.timestamp())),
        }
        if not allowed:
            headers["retry-after"] = str(max(1, math.ceil(max(waits))))
        return Verdict(allowed, headers)
