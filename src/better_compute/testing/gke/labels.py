"""GCP's requirements on a cluster's resource labels, as the real API refuses what breaks them.

At most 64 labels; a key is 1-63 characters, a lower-case letter first; keys and values hold only
lower-case letters, digits, '_' and '-', a value at most 63 characters (docs/providers.md cites the
page). better-compute's marks become such labels (`providers/gcp/shapes.resource_labels`).
"""

from __future__ import annotations

import re
from typing import Any

from better_compute.testing.gke.errors import GkeApiError

__all__ = ["check_resource_labels"]

_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


def check_resource_labels(labels: Any) -> None:
    if not isinstance(labels, dict) or len(labels) > 64:
        raise GkeApiError("INVALID_ARGUMENT", "Cluster.resource_labels: at most 64 labels")
    for key, value in labels.items():
        if not (isinstance(key, str) and _KEY.fullmatch(key)):
            raise GkeApiError("INVALID_ARGUMENT", f"Cluster.resource_labels: invalid label key {key!r}")
        if not (isinstance(value, str) and _VALUE.fullmatch(value)):
            raise GkeApiError("INVALID_ARGUMENT", f"Cluster.resource_labels: invalid value {value!r} of label {key!r}")
