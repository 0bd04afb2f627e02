"""The status a kubelet posts for its Node: capacity, conditions, addresses, nodeInfo."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["node_ip", "node_status", "ready_condition"]


def node_ip(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 2}"


def ready_condition(ready: bool, now: str) -> dict[str, str]:
    """Ready=True while the kubelet reports; Unknown once it stops (what the node controller writes)."""
    return {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_status(
    name: str, index: int, resources: dict[str, str], ready: bool, *, version: str, now: str
) -> dict[str, Any]:
    pressure = [
        {
            "type": kind,
            "status": "False",
            "reason": "KubeletHasSufficientPID" if kind == "PIDPressure" else f"KubeletHasNo{kind}",
            "message": "",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ]
    return {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "conditions": [*pressure, ready_condition(ready, now)],
        "addresses": [{"type": "InternalIP", "address": node_ip(index)}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
            "bootID": str(uuid.uuid4()),
            "kernelVersion": "6.1.0",
            "osImage": "Emulated Linux",
            "containerRuntimeVersion": "containerd://1.7.0",
            "kubeletVersion": f"v{version}",
            "kubeProxyVersion": f"v{version}",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }
