"""What a run compares before it applies bcd's objects, so that a converged substrate writes nothing.

A server-side apply that changes nothing is still a write (a PATCH the API server admits,
audits and stores), and a substrate applies bcd on every run. So each object is applied only
when what is in the cluster differs from it:

- `stamped` marks a manifest with the digest of itself (`APPLIED_ANNOTATION`), so that a
  field the substrate stopped setting (an override taken out of the agent) is seen as a
  change: the object in the cluster still has that field, but not the new digest.
- `holds` says whether an object read from the cluster carries every field of the stamped
  manifest with the same value. What the API server adds (its defaults, status, other
  managers' labels and annotations) does not count; a list must have the same length and each
  element must hold, so an element someone added, changed or took away counts as a change
  and the next apply takes the object back, as the forced apply always did.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["APPLIED_ANNOTATION", "holds", "stamped"]

APPLIED_ANNOTATION = "better-compute.dev/applied"
"""On each object bcd's apply writes: the sha256 of the manifest it applied (without this annotation)."""


def stamped(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """`manifest` with its own digest as the `APPLIED_ANNOTATION` annotation (the manifest is not changed)."""
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    metadata = dict(manifest["metadata"])
    metadata["annotations"] = {**metadata.get("annotations", {}), APPLIED_ANNOTATION: digest}
    return {**manifest, "metadata": metadata}


def holds(live: Any, desired: Any) -> bool:
    """Every field of `desired` is in `live` with the same value (see the module docstring)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and holds(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(holds, live, desired))
    return type(live) is type(desired) and bool(live == desired)
