"""When to look again at a provider operation in progress: near its expected end, then at a share of its age.

A fixed short period wastes reads on a long operation (an EKS cluster read every 15 s
is 40 reads) and still adds up to a whole period to a short one. Instead the first look
comes at `FIRST_LOOK` of what the provider says the operation usually takes
(`KubernetesVocabulary.durations`); from then on each wait is `LATENESS` of the
operation's age. So an operation that ends at any time after the first look is seen by
the time it is at most `1 + LATENESS` times as old, and the reads it costs grow only
with the logarithm of how far it overran the estimate. Waits stay within
[`MIN_WAIT`, `MAX_WAIT`], so a hung operation is still looked at every few minutes.
"""

from __future__ import annotations

__all__ = ["FIRST_LOOK", "LATENESS", "MAX_WAIT", "MIN_WAIT", "poll_after"]

FIRST_LOOK = 0.9
"""The first look, as a share of the provider's estimate."""
LATENESS = 0.05
"""The most a wait may add to an operation's age once the first look has passed."""
MIN_WAIT = 5.0
MAX_WAIT = 300.0


def poll_after(age: float, estimate: float) -> float:
    """Seconds to wait before looking again at an operation `age` seconds old that usually takes `estimate`."""
    first = FIRST_LOOK * estimate
    if age < first:
        return max(MIN_WAIT, first - age)
    return min(MAX_WAIT, max(MIN_WAIT, LATENESS * age))
