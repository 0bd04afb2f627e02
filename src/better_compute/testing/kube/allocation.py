"""The kubelet's device manager at container start: which devices, and what the runtime is asked.

For each container that requests an extended resource a plugin registered (`nvidia.com/gpu: 2`
in its limits), the kubelet picks that many of the plugin's healthy devices that no other
live pod holds (asking GetPreferredAllocation first where the plugin offers it), calls the
plugin's Allocate with them, and hands the runtime the answer: DeviceSpecs, mounts, CDI
names and envs (the plugin's first, then the container's own, which win). Too few devices,
or a refused Allocate, fails the pod with the kubelet's `UnexpectedAdmissionError`
(kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go); asking for `nvidia.com/gpu`
where no plugin registered it fails it with `OutOfnvidia.com/gpu`, as the kubelet's admission does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from better_compute.bcd.proto import deviceplugin_v1beta1_pb2 as pb
from better_compute.bcd.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from better_compute.testing.kube.deviceplugin import RegistrationServer
from better_compute.testing.kube.gpus import ContainerDevices

__all__ = ["AdmissionError", "allocate", "host_mounts", "privileged", "requested"]

ALLOCATE_TIMEOUT_SECONDS = 10.0
GPU_RESOURCE = "nvidia.com/gpu"


class AdmissionError(Exception):
    """The kubelet cannot give the container its devices: the pod fails with `reason`."""

    def __init__(self, message: str, reason: str = "UnexpectedAdmissionError") -> None:
        super().__init__(message)
        self.reason = reason


def requested(container: Mapping[str, Any], resources: set[str]) -> dict[str, int]:
    """The container's asks for the registered extended resources (limits, which equal requests)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {name: int(str(limits[name])) for name in sorted(resources) if int(str(limits.get(name, 0) or 0)) > 0}


def privileged(container: Mapping[str, Any]) -> bool:
    return bool((container.get("securityContext") or {}).get("privileged"))


def host_mounts(pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The container's hostPath mounts as (host path, container path)."""
    volumes = {v.get("name"): v for v in pod.get("spec", {}).get("volumes") or []}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        host = (volumes.get(mount.get("name")) or {}).get("hostPath")
        if host is not None:
            mounts.append((str(host.get("path", "")), str(mount.get("mountPath", ""))))
    return tuple(mounts)


async def _preferred(stub: Any, free: list[str], size: int) -> list[str]:
    request = pb.PreferredAllocationRequest(
        container_requests=[pb.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=size)]
    )
    response = await stub.GetPreferredAllocation(request, timeout=ALLOCATE_TIMEOUT_SECONDS)
    chosen = [d for d in response.container_responses[0].deviceIDs if d in free]
    return list(dict.fromkeys(chosen))[:size]


async def allocate(
    registration: RegistrationServer | None,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    env: Mapping[str, str],
    taken: set[str],
) -> tuple[ContainerDevices, set[str]]:
    """What the runtime is asked for this container, and the devices it now holds; raises AdmissionError."""
    plugins = registration.plugins if registration is not None else {}
    devices = ContainerDevices(mounts=host_mounts(pod, container), env=dict(env), privileged=privileged(container))
    held: set[str] = set()
    for resource, count in requested(container, {GPU_RESOURCE} - set(plugins)).items():
        raise AdmissionError(
            f"Node didn't have enough resource: {resource}, requested: {count}, used: 0, capacity: 0",
            reason=f"OutOf{resource}",
        )
    for resource, count in requested(container, set(plugins)).items():
        plugin = plugins[resource]
        free = [d.id for d in plugin.devices if d.health == "Healthy" and d.id not in taken | held]
        if len(free) < count:
            raise AdmissionError(
                f"Allocate failed due to requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(free)}, which is unexpected"
            )
        async with grpc.aio.insecure_channel(f"unix:{registration.directory / plugin.endpoint}") as channel:  # type: ignore[union-attr]
            stub = pb_grpc.DevicePluginStub(channel)
            try:
                chosen = await _preferred(stub, free, count) if plugin.preferred_allocation else []
                chosen += [d for d in free if d not in chosen][: count - len(chosen)]
                answer = await stub.Allocate(
                    pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]),
                    timeout=ALLOCATE_TIMEOUT_SECONDS,
                )
            except grpc.aio.AioRpcError as exc:
                raise AdmissionError(f"Allocate failed for {resource}: {exc.details()}") from exc
        response = answer.container_responses[0]
        held.update(chosen)
        devices = ContainerDevices(
            device_nodes=devices.device_nodes + tuple(d.host_path for d in response.devices),
            mounts=devices.mounts + tuple((m.host_path, m.container_path) for m in response.mounts),
            cdi_devices=devices.cdi_devices + tuple(d.name for d in response.cdi_devices),
            env={**dict(response.envs), **dict(devices.env or {})},
            privileged=devices.privileged,
        )
    return devices, held
