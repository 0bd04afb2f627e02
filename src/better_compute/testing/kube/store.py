"""Where a cluster's objects live: one revision counter, like etcd's.

The store only keeps objects and hands out resource versions; the rules about
them (conflicts, generation, finalizers, managedFields) live in `operations`.
Every change is announced to subscribers (watches, controllers, the kubelet),
in order, with the object as it is after the change. Stored objects are never
changed in place (a write stores a new copy), so `peek`/`items` and the
announced changes share them; their readers must not mutate them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from better_compute.testing.kube.resources import ResourceType

__all__ = ["Change", "ObjectStore", "timestamp"]


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, seconds precision: how Kubernetes writes times."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    type: str  # ADDED | MODIFIED | DELETED
    resource: ResourceType
    object: dict[str, Any]
    revision: int


class ObjectStore:
    def __init__(self) -> None:
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._revision = 0
        self._subscribers: list[Callable[[Change], None]] = []
        self.history: list[Change] = []

    @property
    def revision(self) -> int:
        return self._revision

    def subscribe(self, callback: Callable[[Change], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._objects.get(rt.key, {}).get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def peek(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object itself, not a copy: for controllers that only read it."""
        return self._objects.get(rt.key, {}).get((namespace, name))

    def items(self, rt: ResourceType, namespace: str | None = None) -> list[dict[str, Any]]:
        """The stored objects themselves (read-only), in key order."""
        bucket = self._objects.get(rt.key, {})
        return [bucket[key] for key in sorted(bucket) if namespace is None or key[0] == namespace]

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[dict[str, Any]]:
        bucket = self._objects.get(rt.key, {})
        return [copy.deepcopy(bucket[key]) for key in sorted(bucket) if namespace is None or key[0] == namespace]

    def count_in_namespace(self, namespace: str, resources: tuple[ResourceType, ...]) -> int:
        return sum(1 for rt in resources for key in self._objects.get(rt.key, {}) if key[0] == namespace)

    def write(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new or changed object under a fresh resourceVersion."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self._objects.setdefault(rt.key, {})
        kind = "MODIFIED" if key in bucket else "ADDED"
        self._revision += 1
        meta["resourceVersion"] = str(self._revision)
        stored = copy.deepcopy(obj)
        bucket[key] = stored
        self._announce(Change(kind, rt, stored, self._revision))
        return obj

    def remove(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self._objects.get(rt.key, {}).pop((meta.get("namespace", ""), meta["name"]), None)
        self._revision += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._revision)
        self._announce(Change("DELETED", rt, gone, self._revision))
        return copy.deepcopy(gone)

    def _announce(self, change: Change) -> None:
        self.history.append(change)
        del self.history[:-1000]
        for callback in list(self._subscribers):
            callback(change)
