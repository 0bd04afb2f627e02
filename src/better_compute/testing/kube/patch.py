"""The non-apply PATCH bodies: JSON merge patch, strategic merge patch, JSON patch.

Merge patch (RFC 7386): maps merge, `null` deletes, lists are replaced.
Strategic merge patch: like merge patch, but lists with a patch merge key
(containers by name, env by name, ...) merge item by item, `$patch: delete`
removes an item, `$patch: replace` replaces a map or list, and the `$`-prefixed
ordering directives kubectl sends are accepted and dropped.
JSON patch (RFC 6902): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

import copy
from typing import Any

from better_compute.testing.kube.fieldsets import ASSOCIATIVE, SETS
from better_compute.testing.kube.status import KubeError

__all__ = ["json_patch", "merge_patch", "strategic_merge_patch"]

_SMP_KEYS: dict[str, str] = {field: keys[0] for field, keys in ASSOCIATIVE.items()}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, list):
        return _smp_list(target if isinstance(target, list) else [], patch, field)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [item for item in result.get(name, []) if item not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        merged = strategic_merge_patch(result.get(key), value, key)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    return result


def _smp_list(target: list[Any], patch: list[Any], field: str) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    key = _SMP_KEYS.get(field)
    if field in SETS:
        return target + [item for item in patch if item not in target]
    if key is None or not all(isinstance(item, dict) for item in patch):
        return copy.deepcopy(patch)
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        position = next(
            (i for i, current in enumerate(result) if isinstance(current, dict) and current.get(key) == item.get(key)),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
        elif position is None:
            result.append(copy.deepcopy(item))
        else:
            result[position] = strategic_merge_patch(result[position], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise KubeError.bad_request(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    current = doc
    for part in parts[:-1]:
        current = current[int(part)] if isinstance(current, list) else current[part]
    return current


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise KubeError.bad_request("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for operation in operations:
        try:
            doc = _json_patch_one(doc, operation)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise KubeError(
                422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
    return doc


def _json_patch_one(doc: Any, operation: dict[str, Any]) -> Any:
    op = operation["op"]
    parts = _pointer(operation["path"])
    if op == "test":
        current = doc
        for part in parts:
            current = current[int(part)] if isinstance(current, list) else current[part]
        if current != operation.get("value"):
            raise ValueError(f"testing value {operation['path']} failed")
        return doc
    if op in ("move", "copy"):
        source = _pointer(operation["from"])
        current = doc
        for part in source:
            current = current[int(part)] if isinstance(current, list) else current[part]
        value = copy.deepcopy(current)
        if op == "move":
            doc = _json_patch_one(doc, {"op": "remove", "path": operation["from"]})
        return _json_patch_one(doc, {"op": "add", "path": operation["path"], "value": value})
    if not parts:
        return copy.deepcopy(operation.get("value")) if op in ("add", "replace") else None
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if op == "add":
            parent.insert(index, copy.deepcopy(operation["value"]))
        elif op == "remove":
            del parent[index]
        elif op == "replace":
            parent[index] = copy.deepcopy(operation["value"])
        else:
            raise ValueError(f"unknown operation {op!r}")
    else:
        if op in ("remove", "replace") and last not in parent:
            raise KeyError(last)
        if op == "remove":
            del parent[last]
        elif op in ("add", "replace"):
            parent[last] = copy.deepcopy(operation["value"])
        else:
            raise ValueError(f"unknown operation {op!r}")
    return doc
