"""The inventory bcd reports for its node: the `os` section and the GPUs.

    {"os": {"hostname": "...", "kubernetesNodeName": "..."},   # kubernetesNodeName: optional
     "gpus": [{"index": 0, "uuid": "GPU-...", "model": "NVIDIA H100 80GB HBM3",
               "health": {"healthy": false, "reason": "xid", "xid": 79,          # health: optional
                          "resetNeeded": true}}, ...],   # or "recheckingUntil": "<ISO time>"
     ...}                                                       # other sections are kept as given

Checked here so every caller (the gateway, tests, the demo) gets the same answer with a path.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

from .validation import invalid

__all__ = ["COMPETING", "GpuInfo", "Unhealthy", "check_inventory", "competing_plugins", "unhealthy_gpus"]

MAX_INVENTORY_BYTES = 256 * 1024
GpuInfo = tuple[int, str, str]


class Unhealthy(NamedTuple):
    """Why bcd calls a GPU unhealthy: its reason (bcd/health.py's codes) and XID, if the reason is one; its
    state (`reset-needed`, `rechecking` until a time on bcd's clock, else `unhealthy`)."""

    reason: str
    xid: int | None
    state: str
    until: datetime | None


COMPETING = "competingDevicePlugins"
"""Where bcd names the other device plugins for its resource on its node: while any is there, a pod
could get the node's GPUs without a reservation, so its GPUs take no new booking."""


def check_inventory(inventory: object, path: str = "/inventory") -> tuple[dict[str, Any], list[GpuInfo]]:
    """The inventory as stored, and its GPUs as (index, uuid, model); INVALID_INPUT at the first bad field."""
    if not isinstance(inventory, dict):
        raise invalid(path, "an inventory is a JSON object")
    try:
        encoded = json.dumps(inventory)
    except (TypeError, ValueError) as exc:
        raise invalid(path, "an inventory holds only JSON values") from exc
    if len(encoded) > MAX_INVENTORY_BYTES:
        raise invalid(path, f"an inventory is at most {MAX_INVENTORY_BYTES} bytes of JSON")
    os_section = inventory.get("os")
    if os_section is not None:
        if not isinstance(os_section, dict):
            raise invalid(f"{path}/os", "the os section is an object")
        for key in ("hostname", "kubernetesNodeName"):
            value = os_section.get(key)
            if value is not None and (not isinstance(value, str) or not value or len(value) > 253):
                raise invalid(f"{path}/os/{key}", "expected a host or Node name of 1 to 253 characters")
    gpus = inventory.get("gpus", [])
    if not isinstance(gpus, list):
        raise invalid(f"{path}/gpus", "gpus is a list")
    found: list[GpuInfo] = []
    indexes: set[int] = set()
    uuids: set[str] = set()
    for i, gpu in enumerate(gpus):
        where = f"{path}/gpus/{i}"
        if not isinstance(gpu, dict):
            raise invalid(where, "a GPU is an object with index, uuid and model")
        index, uuid, model = gpu.get("index"), gpu.get("uuid"), gpu.get("model")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise invalid(f"{where}/index", "a GPU index is a whole number, 0 or more")
        if not isinstance(uuid, str) or not uuid or len(uuid) > 128:
            raise invalid(f"{where}/uuid", "a GPU uuid is a string of 1 to 128 characters")
        if not isinstance(model, str) or not model or len(model) > 128:
            raise invalid(f"{where}/model", "a GPU model is a string of 1 to 128 characters")
        if index in indexes:
            raise invalid(f"{where}/index", f"GPU index {index} appears twice")
        if uuid in uuids:
            raise invalid(f"{where}/uuid", f"GPU uuid {uuid!r} appears twice")
        _check_health(gpu.get("health"), f"{where}/health")
        indexes.add(index)
        uuids.add(uuid)
        found.append((index, uuid, model))
    competing = inventory.get(COMPETING, [])
    if not isinstance(competing, list) or len(competing) > 32:
        raise invalid(f"{path}/{COMPETING}", "competingDevicePlugins is a list of at most 32 names")
    for i, name in enumerate(competing):
        if not isinstance(name, str) or not name or len(name) > 253:
            raise invalid(f"{path}/{COMPETING}/{i}", "a device plugin is named by a string of 1 to 253 characters")
    return cast(dict[str, Any], json.loads(encoded)), found


def _check_health(health: object, where: str) -> None:
    if health is None:
        return
    if not isinstance(health, dict) or not isinstance(health.get("healthy", True), bool):
        raise invalid(where, "a GPU's health is an object whose healthy is true or false")
    reason, xid = health.get("reason"), health.get("xid")
    if reason is not None and (not isinstance(reason, str) or not reason or len(reason) > 64):
        raise invalid(f"{where}/reason", "a health reason is a string of 1 to 64 characters")
    if health.get("healthy") is False and reason is None:
        raise invalid(f"{where}/reason", "an unhealthy GPU says why")
    if xid is not None and (not isinstance(xid, int) or isinstance(xid, bool) or not 0 <= xid <= 65535):
        raise invalid(f"{where}/xid", "an XID is a whole number from 0 to 65535")
    if not isinstance(health.get("resetNeeded", False), bool):
        raise invalid(f"{where}/resetNeeded", "resetNeeded is true or false")
    until = health.get("recheckingUntil")
    if until is not None and _moment(until) is None:
        raise invalid(f"{where}/recheckingUntil", "recheckingUntil is an ISO 8601 time with its offset")


def _moment(value: object) -> datetime | None:
    """An ISO 8601 time with an offset, in UTC; None for anything else."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment.tzinfo is not None else None


def unhealthy_gpus(inventory: dict[str, Any]) -> dict[str, Unhealthy]:
    """The GPUs bcd reports unhealthy (a checked inventory), by uuid, with the reason, XID and state."""
    found: dict[str, Unhealthy] = {}
    for gpu in inventory.get("gpus") or []:
        health = gpu.get("health") or {}
        if health.get("healthy") is False:
            until = _moment(health.get("recheckingUntil"))
            state = "reset-needed" if health.get("resetNeeded") else "rechecking" if until else "unhealthy"
            found[str(gpu["uuid"])] = Unhealthy(str(health["reason"]), health.get("xid"), state, until)
    return found


def competing_plugins(inventory: dict[str, Any]) -> list[str]:
    """The other device plugins bcd found registering its resource on its node (a checked inventory)."""
    return [str(name) for name in inventory.get(COMPETING) or []]
