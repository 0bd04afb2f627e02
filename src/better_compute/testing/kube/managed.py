"""`managedFields` bookkeeping and server-side apply.

An *update* (create, PUT, merge or strategic patch) gives its manager every field
it changed and takes those fields from everyone else, silently. An *apply* gives
its manager exactly the fields of the applied configuration; a field another
manager owns with a different value is a conflict (409, causes of type
`FieldManagerConflict`) unless `force` takes it over. Fields the applier owned
before and no longer applies are removed when nobody else owns them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from better_compute.testing.kube.fieldsets import (
    Path,
    decode,
    encode,
    field_paths,
    format_path,
    merge_structured,
    remove_path,
    value_at,
)
from better_compute.testing.kube.resources import ResourceType
from better_compute.testing.kube.status import KubeError

__all__ = ["Entry", "apply_configuration", "record_update"]


@dataclass
class Entry:
    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    time: str
    paths: set[Path]
    subresource: str = ""

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(self.paths),
        }
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def _entries(obj: dict[str, Any]) -> list[Entry]:
    return [
        Entry(
            manager=raw.get("manager", ""),
            operation=raw.get("operation", "Update"),
            api_version=raw.get("apiVersion", ""),
            time=raw.get("time", ""),
            paths=decode(raw.get("fieldsV1") or {}),
            subresource=raw.get("subresource", ""),
        )
        for raw in obj.get("metadata", {}).get("managedFields") or []
    ]


def _store(obj: dict[str, Any], entries: list[Entry]) -> None:
    kept = [e.to_json() for e in entries if e.paths]
    if kept:
        obj["metadata"]["managedFields"] = kept
    else:
        obj["metadata"].pop("managedFields", None)


def _status_only(obj: dict[str, Any]) -> dict[str, Any]:
    return {"status": obj["status"]} if "status" in obj else {}


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    rt: ResourceType,
    now: str,
    subresource: str = "",
) -> None:
    """Attribute what changed from `old` to `new` to `manager` (operation Update)."""
    entries = _entries(old) if old is not None else []
    include_status = subresource == "status" or "status" not in rt.subresources
    if subresource == "status" and old is not None:
        # A status write changes nothing else (operations._commit keeps the rest of the live
        # object), so only the status subtree is compared: a kubelet's pod status writes
        # would otherwise walk the whole pod spec each time.
        old, new_view = _status_only(old), _status_only(new)
    else:
        new_view = new
    new_paths = field_paths(new_view, include_status=include_status)
    old_paths = field_paths(old, include_status=include_status) if old is not None else set()
    changed = {p for p in new_paths if old is None or value_at(old, p) != value_at(new_view, p)}
    gone = old_paths - new_paths
    mine = next((e for e in entries if e.identity == (manager, "Update", subresource)), None)
    for entry in entries:
        entry.paths -= gone
        if entry is not mine:
            entry.paths -= changed
    if changed:
        if mine is None:
            mine = Entry(manager, "Update", rt.api_version, now, set(), subresource)
            entries.append(mine)
        mine.paths |= changed
        mine.time = now
    _store(new, entries)


def apply_configuration(
    live: dict[str, Any] | None,
    config: dict[str, Any],
    *,
    manager: str,
    force: bool,
    rt: ResourceType,
    now: str,
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (None: create it)."""
    base = copy.deepcopy(live) if live is not None else {"metadata": {}}
    entries = _entries(base)
    applied = field_paths(config, include_status="status" not in rt.subresources)
    conflicts: list[tuple[Entry, Path]] = []
    for entry in entries:
        if entry.manager == manager and entry.operation == "Apply":
            continue
        for path in sorted(applied & entry.paths):
            if path[-1] != "." and value_at(base, path) != value_at(config, path):
                conflicts.append((entry, path))
    if conflicts and not force:
        raise _conflict_error(rt, config["metadata"]["name"], conflicts)
    for entry, path in conflicts:
        entry.paths.discard(path)
    mine = next((e for e in entries if e.manager == manager and e.operation == "Apply"), None)
    previous = mine.paths if mine is not None else set()
    merged: dict[str, Any] = merge_structured(base, config)
    others = [e for e in entries if e is not mine]
    for path in sorted(previous - applied, key=lambda p: (p[-1] != ".", len(p))):
        if not any(_covers(e, path) for e in others):
            remove_path(merged, path)
    if mine is None:
        mine = Entry(manager, "Apply", rt.api_version, now, set())
        entries.append(mine)
    mine.paths = applied
    mine.time = now
    _store(merged, entries)
    return merged


def _covers(entry: Entry, path: Path) -> bool:
    """Whether `entry` owns `path` or, for a whole list item, anything inside it."""
    if path[-1] == ".":
        prefix = path[:-1]
        return any(p[: len(prefix)] == prefix for p in entry.paths)
    return path in entry.paths


def _describe(entry: Entry) -> str:
    """How the real server names a manager in conflict messages (never with a time)."""
    who = f'"{entry.manager}"'
    if entry.subresource:
        who += f' with subresource "{entry.subresource}"'
    if entry.operation == "Update":
        who += f" using {entry.api_version}"
    return who


def _conflict_error(rt: ResourceType, name: str, conflicts: list[tuple[Entry, Path]]) -> KubeError:
    causes = []
    grouped: dict[str, list[str]] = {}
    for entry, path in conflicts:
        who = _describe(entry)
        causes.append({"reason": "FieldManagerConflict", "message": f"conflict with {who}", "field": format_path(path)})
        grouped.setdefault(who, []).append(format_path(path))
    if len(conflicts) == 1:
        message = f"Apply failed with 1 conflict: conflict with {causes[0]['message'][14:]}: {causes[0]['field']}"
    else:
        lines = []
        for who in sorted(grouped):
            lines.append(f"conflicts with {who}:")
            lines.extend(f"- {field}" for field in grouped[who])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    details: dict[str, Any] = {"name": name, "kind": rt.plural, "causes": causes}
    if rt.group:
        details["group"] = rt.group
    return KubeError(409, "Conflict", message, details)
