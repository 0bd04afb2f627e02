"""Faults a test injects into the GKE emulator."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GkeFaults"]


@dataclass
class GkeFaults:
    """What goes wrong, until a test sets it back.

    - `quota_exceeded`: creating a cluster or node pool answers 403 "Insufficient regional quota".
    - `stockout`: machine types whose node pools fail while provisioning (GCE_STOCKOUT, the zone has no capacity).
    - `refuse_delete`: deleting a cluster answers 400 FAILED_PRECONDITION.
    - `unresponsive`: clusters created from now on never finish provisioning and their API never answers.
    - `throttle`: how many of the next requests answer 429 with RetryInfo and Retry-After `throttle_retry_after`.
    - `compute_denied`: Compute Engine refuses to read instance group managers (403: the caller lacks
      `compute.instanceGroupManagers.get`, or `compute.regions.get` for the region's quotas).
    - `compute_disabled`: the Compute Engine API is off in the project: regions.get answers 403 accessNotConfigured.
    """

    quota_exceeded: bool = False
    stockout: set[str] = field(default_factory=set)
    refuse_delete: bool = False
    unresponsive: bool = False
    throttle: int = 0
    throttle_retry_after: int = 30
    compute_denied: bool = False
    compute_disabled: bool = False
