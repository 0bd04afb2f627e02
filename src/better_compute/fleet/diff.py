"""Field-level differences between two JSON values, in names an operator reads.

Nested objects flatten to dotted paths (`policy.kubernetes.platformOperated`).
Lists of objects that carry a `name` (flavors) are keyed by it, so reordering
flavors is no change and a resized flavor reads `flavors[h100].nodes`. Other
lists (zones) are compared whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MISSING", "Change", "diff", "flatten"]


class _Missing:
    """The value of a field that is absent on one side."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Change:
    """One field: `old` is MISSING when it is added, `new` is MISSING when it is removed."""

    field: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"field": self.field}
        if self.old is not MISSING:
            body["old"] = self.old
        if self.new is not MISSING:
            body["new"] = self.new
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        return cls(str(data["field"]), data.get("old", MISSING), data.get("new", MISSING))


def _named_list(value: list[Any]) -> bool:
    names = [v.get("name") for v in value if isinstance(v, dict)]
    return (
        bool(value)
        and len(names) == len(value)
        and all(isinstance(n, str) for n in names)
        and len(set(names)) == len(names)
    )


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf paths to leaf values. An empty object has no leaves: `labels: {}` is no labels."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and _named_list(value):
        out = {}
        for item in value:
            out.update(flatten({k: v for k, v in item.items() if k != "name"}, f"{prefix}[{item['name']}]"))
        return out
    return {prefix: value}


def diff(old: Any, new: Any, prefix: str = "") -> list[Change]:
    """Every leaf that differs, sorted by path."""
    left, right = flatten(old, prefix), flatten(new, prefix)
    changes = []
    for path in sorted(left.keys() | right.keys()):
        a, b = left.get(path, MISSING), right.get(path, MISSING)
        if a is MISSING or b is MISSING or a != b or type(a) is not type(b):
            changes.append(Change(path, a, b))
    return changes
