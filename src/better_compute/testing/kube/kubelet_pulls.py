"""The kubelet's image pulls, tried again after its image back-off, so a cleared pull fault heals on its own.

As the kubelet's image manager does, the back-off is kept per pod and image (a pod given another
image pulls it at once): the first failed pull starts it at 10 s, each failed pull after it doubles
it up to 300 s. (The real one also starts over once nothing has failed for twice that cap, which a
pod tried on schedule never reaches.) A pull is tried only once the back-off since the last failure has run
out; until then the container waits with ImagePullBackOff, just after a failed pull with
ErrImagePull. The pod worker syncs a pod whose sync failed again 10 s later; the emulator syncs it
then (where the back-off is longer) and when the back-off ends, not every 10 s, so its Events'
counts grow slower than a real kubelet's. docs/providers.md cites the figures.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from better_compute.testing.kube.kubelet_runs import PodRuns
from better_compute.testing.kube.podstatus import waiting_status

__all__ = ["MAX_PULL_BACKOFF", "PULL_BACKOFF", "SYNC_RETRY", "ImagePulls", "PullBackOff"]

PULL_BACKOFF = 10.0
MAX_PULL_BACKOFF = 300.0
SYNC_RETRY = 10.0
"""The pod worker's wait before it syncs a pod whose last sync failed (the real one adds up to half again)."""


@dataclass(frozen=True)
class PullBackOff:
    """One pod's back-off for one image: how long after the failure at `failed_at` no pull is tried."""

    delay: float
    failed_at: datetime
    error: str

    def holds(self, now: datetime) -> bool:
        return now - self.failed_at < timedelta(seconds=self.delay)

    def after(self, now: datetime, error: str) -> PullBackOff:
        """The back-off once another pull failed at `now`."""
        return PullBackOff(min(self.delay * 2, MAX_PULL_BACKOFF), now, error)


class ImagePulls(PodRuns):
    """Pull a pod's images before it starts, back off after a failed pull, and try again on the cluster's clock."""

    def _pulled(self, live: dict[str, Any], node_name: str) -> bool:
        """Pull each of the pod's images (in back-off, none is tried); False, with the wait written, when
        one cannot be had yet."""
        uid = live["metadata"]["uid"]
        now = self._cluster.clock.now()
        for image in _images(live):
            backoff = self._pull_backoffs.get((uid, image))
            if backoff is not None and backoff.holds(now):
                self._waiting(live, node_name, "ImagePullBackOff", f'Back-off pulling image "{image}": {backoff.error}')
                self._event(live, node_name, "BackOff", f'Back-off pulling image "{image}"', type_="Normal")
                self._event(live, node_name, "Failed", "Error: ImagePullBackOff")
                return False
            if not any(fnmatch.fnmatchcase(image, pattern) for pattern in self.image_pull_failures):
                continue
            error = f'Failed to pull image "{image}": failed to resolve reference "{image}": not found'
            first = PullBackOff(PULL_BACKOFF, now, error)
            self._pull_backoffs[(uid, image)] = first if backoff is None else backoff.after(now, error)
            self._waiting(live, node_name, "ErrImagePull", error)
            self._event(live, node_name, "Failed", error)
            self._event(live, node_name, "Failed", "Error: ErrImagePull")
            return False
        return True

    def _next_pull_sync(self, uid: str) -> float | None:
        """Seconds to the pod's next sync: 10 s after its last failed pull, or its back-off's end."""
        now = self._cluster.clock.now()
        times = [
            backoff.failed_at + timedelta(seconds=seconds)
            for (pod, _), backoff in self._pull_backoffs.items()
            if pod == uid
            for seconds in (min(SYNC_RETRY, backoff.delay), backoff.delay)
        ]
        due = [t for t in times if t > now]
        return (min(due) - now).total_seconds() if due else None

    def _waiting(self, pod: dict[str, Any], node_name: str, reason: str, message: str) -> None:
        """The pod cannot start yet: say why (once; the status is kept while the reason is), and
        leave it alone until the pod or what it references changes, or its pull back-off ends."""
        status = waiting_status(pod, self._host_ip(node_name), reason, message, self._now())
        self._blocked[pod["metadata"]["uid"]] = self._blocked_key(self._set_status(pod, status))

    def _forget_pulls(self, present: set[str]) -> None:
        """Drop the back-offs and pod workers of pods that are gone."""
        for key in [k for k in self._pull_backoffs if k[0] not in present]:
            del self._pull_backoffs[key]
        for uid in [u for u in self._pull_workers if u not in present]:
            self._pull_workers.pop(uid).cancel()


def _images(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec", {})
    return [str(c.get("image", "")) for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
