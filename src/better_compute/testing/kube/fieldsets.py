"""Field paths and field sets: the vocabulary of `managedFields`.

A path is a tuple of the real server's path elements: `f:<field>` for a map
field, `k:<json of the merge keys>` for an item of an associative list,
`v:<json value>` for a member of a set list, and `.` for "the item itself".
`encode`/`decode` turn a set of paths into the `fieldsV1` tree that clients see.
Which lists are associative follows the published schemas (containers by name,
ports by containerPort and protocol, ...); every other list is atomic.
"""

from __future__ import annotations

import copy
import json
from typing import Any

__all__ = [
    "ASSOCIATIVE",
    "SETS",
    "Path",
    "decode",
    "encode",
    "field_paths",
    "format_path",
    "merge_structured",
    "remove_path",
    "value_at",
]

Path = tuple[str, ...]

ASSOCIATIVE: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "ports": ("containerPort", "protocol"),
    "imagePullSecrets": ("name",),
    "conditions": ("type",),
    "taints": ("key", "effect"),
    "ownerReferences": ("uid",),
    "addresses": ("type",),
    "hostAliases": ("ip",),
}
SETS = frozenset({"finalizers"})

# Fields that identify or describe an object rather than hold what a manager set.
_UNMANAGED_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _item_key(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    return "k:" + _dumps({k: item[k] for k in keys if k in item})


def field_paths(obj: dict[str, Any], *, include_status: bool) -> set[Path]:
    """Every leaf path an object sets (what a manager would own by writing it)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and not include_status):
            continue
        if key == "metadata" and isinstance(value, dict):
            for mkey, mvalue in value.items():
                if mkey not in _UNMANAGED_METADATA:
                    _walk(mvalue, ("f:metadata", f"f:{mkey}"), mkey, out)
            continue
        _walk(value, (f"f:{key}",), key, out)
    return out


def _walk(value: Any, path: Path, field: str, out: set[Path]) -> None:
    if isinstance(value, dict):
        if not value:
            out.add(path)
        for key, sub in value.items():
            _walk(sub, (*path, f"f:{key}"), key, out)
    elif isinstance(value, list):
        keys = ASSOCIATIVE.get(field)
        if field in SETS:
            out.update((*path, "v:" + _dumps(item)) for item in value)
        elif keys and value and all(isinstance(item, dict) for item in value):
            for item in value:
                element = _item_key(item, keys)
                out.add((*path, element, "."))
                for key, sub in item.items():
                    _walk(sub, (*path, element, f"f:{key}"), key, out)
        else:
            out.add(path)
    elif value is not None:
        out.add(path)


def encode(paths: set[Path]) -> dict[str, Any]:
    """The `fieldsV1` tree of a set of paths."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    return tree


def decode(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for element, sub in tree.items():
        path = (*prefix, element)
        if sub:
            paths |= decode(sub, path)
        else:
            paths.add(path)
    return paths


_MISSING = object()


def _step(current: Any, element: str) -> Any:
    if element.startswith("f:"):
        return current.get(element[2:], _MISSING) if isinstance(current, dict) else _MISSING
    if element.startswith("k:") and isinstance(current, list):
        wanted = json.loads(element[2:])
        for item in current:
            if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
                return item
        return _MISSING
    if element.startswith("v:") and isinstance(current, list):
        wanted = json.loads(element[2:])
        return wanted if wanted in current else _MISSING
    return current if element == "." else _MISSING


def value_at(obj: Any, path: Path) -> Any:
    """The value at `path`, or a private sentinel when absent (compare, don't inspect)."""
    current = obj
    for element in path:
        current = _step(current, element)
        if current is _MISSING:
            return _MISSING
    return current


def remove_path(obj: dict[str, Any], path: Path) -> None:
    """Remove what `path` names: a map field, a set member, or a whole list item."""
    if path and path[-1] == ".":
        path = path[:-1]
    if not path:
        return
    parent = value_at(obj, path[:-1])
    last = path[-1]
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith(("k:", "v:")) and isinstance(parent, list):
        target = value_at(obj, path)
        if target is not _MISSING:
            parent[:] = [item for item in parent if item is not target and item != target]


def format_path(path: Path) -> str:
    """`.spec.template.spec.containers[name="bcd"].image`, as conflict messages write it."""
    text = ""
    for element in path:
        if element.startswith("f:"):
            text += "." + element[2:]
        elif element.startswith("k:"):
            keys = json.loads(element[2:])
            text += "[" + ",".join(f"{k}={_dumps(v)}" for k, v in keys.items()) + "]"
        elif element.startswith("v:"):
            text += f"[={element[2:]}]"
    return text


def merge_structured(base: Any, patch: Any, field: str = "") -> Any:
    """Merge an applied configuration into an object: maps recurse, associative lists
    merge item by key, set lists union, anything else is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if value is None:
                continue
            merged[key] = merge_structured(base.get(key), value, key)
        return merged
    if isinstance(base, list) and isinstance(patch, list):
        keys = ASSOCIATIVE.get(field)
        if field in SETS:
            return base + [item for item in patch if item not in base]
        if keys and all(isinstance(item, dict) for item in base + patch):
            merged_items = [copy.deepcopy(item) for item in base]
            for item in patch:
                element = _item_key(item, keys)
                match = _step(merged_items, element)
                if match is _MISSING:
                    merged_items.append(copy.deepcopy(item))
                else:
                    index = next(i for i, candidate in enumerate(merged_items) if candidate is match)
                    merged_items[index] = merge_structured(match, item)
            return merged_items
    return copy.deepcopy(patch)
