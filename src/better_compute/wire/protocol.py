"""The wire protocol between bcd and the node gateway: paths and pydantic models, validated on both ends.

Join is one HTTP call (`POST JOIN_PATH`, `JoinRequest` -> `JoinResponse`). After
that, bcd holds a WebSocket (`CONNECT_PATH`) whose text frames are JSON messages
with a `type`:

    bcd -> gateway   hello (credential + inventory, first and once), heartbeat, inventory
    gateway -> bcd   welcome (node id, heartbeat interval), assignment

The credential travels in the first message, not in the upgrade request, so that bcd
checks the gateway's certificate pin before it sends anything secret. Keys are camelCase
on the wire. A message over `MAX_MESSAGE_BYTES`, or one that does not validate, closes the
session.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from better_compute.core.errors import ComputeError
from better_compute.core.input import FRAME, decode_json

__all__ = [
    "CONNECT_PATH",
    "JOIN_PATH",
    "MAX_MESSAGE_BYTES",
    "Assignment",
    "AssignmentMessage",
    "ClientMessage",
    "GpuHealth",
    "GpuInfo",
    "Heartbeat",
    "Hello",
    "Inventory",
    "InventoryUpdate",
    "JoinRequest",
    "JoinResponse",
    "OsInfo",
    "ReservationDevices",
    "ServerMessage",
    "Welcome",
    "parse_client_message",
    "parse_server_message",
]

JOIN_PATH = "/v1/gateway/join"
CONNECT_PATH = "/v1/gateway/connect"

MAX_MESSAGE_BYTES = 64 * 1024
"""The largest frame either side accepts; an inventory of 64 GPUs is about 10 KiB."""

Name = Annotated[str, Field(min_length=1, max_length=253)]
Short = Annotated[str, Field(max_length=256)]


class Wire(BaseModel):
    """camelCase on the wire, snake_case in Python, nothing unknown accepted."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def to_wire(self) -> str:
        return self.model_dump_json(by_alias=True)


HealthReason = Literal[
    "gpu-lost",
    "xid",
    "double-bit-ecc",
    "row-remap-pending",
    "row-remap-failed",
    "page-retirement-pending",
    "hw-slowdown",
]
"""Why bcd calls a GPU unhealthy (docs/bcd.md, "GPU health", says which NVML reading each comes from)."""


class GpuHealth(Wire):
    """A GPU's health as bcd last read it through NVML: healthy, or unhealthy with the reason (and the XID).

    An unhealthy GPU whose fault needs a reset says `reset_needed`; one whose fault cleared and that is
    reading healthy for the clean period says `rechecking_until` (when it returns, on bcd's clock)."""

    healthy: bool = True
    reason: HealthReason | None = None
    xid: Annotated[int, Field(ge=0, le=65535)] | None = None
    detail: Short | None = None
    reset_needed: bool = False
    rechecking_until: AwareDatetime | None = None


class GpuInfo(Wire):
    index: Annotated[int, Field(ge=0, le=1024)]
    uuid: Annotated[str, Field(min_length=1, max_length=128)]
    model: Annotated[str, Field(min_length=1, max_length=128)]
    memory_mib: Annotated[int, Field(ge=0)] | None = None
    health: GpuHealth = GpuHealth()


class OsInfo(Wire):
    """Who the node is: the hostname, and the Kubernetes Node name from the downward API."""

    hostname: Name
    kubernetes_node_name: Name | None = None
    kernel: Short = ""
    distribution: Short = ""
    arch: Short = ""
    driver_version: Short | None = None


class Inventory(Wire):
    os: OsInfo
    gpus: Annotated[list[GpuInfo], Field(max_length=256)] = []
    competing_device_plugins: Annotated[list[Name], Field(max_length=32)] = []
    """Other device plugins (their sockets) registering bcd's resource on this node: while any is
    there the kubelet may hand the node's GPUs to pods bcd never saw, so the node takes no booking."""

    @property
    def node_name(self) -> str:
        """The name the node joins under: its Kubernetes Node name, else its hostname."""
        return self.os.kubernetes_node_name or self.os.hostname


class JoinRequest(Wire):
    token: Annotated[str, Field(min_length=8, max_length=512)]
    inventory: Inventory
    identity_token: Annotated[str, Field(min_length=16, max_length=16384)] | None = None
    """The pod's projected ServiceAccount token (Kubernetes substrates): proof of which Node this is."""

    def __repr__(self) -> str:
        return f"JoinRequest(token=[REDACTED], inventory={self.inventory!r}, identity_token=[REDACTED])"


class JoinResponse(Wire):
    node_id: Name
    pool_id: Name
    credential: Annotated[str, Field(min_length=8, max_length=512)]


class ReservationDevices(Wire):
    id: Name
    devices: Annotated[list[Name], Field(max_length=256)]


class Assignment(Wire):
    """What the node holds now: reservations with their device UUIDs, system labels, cordon."""

    reservations: Annotated[list[ReservationDevices], Field(max_length=256)] = []
    system_labels: dict[Name, Short] = {}
    cordoned: bool = False

    def held_devices(self) -> frozenset[str]:
        return frozenset(device for reservation in self.reservations for device in reservation.devices)


class Hello(Wire):
    type: Literal["hello"] = "hello"
    credential: Annotated[str, Field(min_length=8, max_length=512)]
    inventory: Inventory


class Heartbeat(Wire):
    type: Literal["heartbeat"] = "heartbeat"
    seq: Annotated[int, Field(ge=0)]
    unhealthy_gpus: Annotated[list[Name], Field(max_length=256)] = []
    """The UUIDs of the node's GPUs that are unhealthy now; the reasons travel in the inventory update
    bcd sends the moment health changes (and in every hello)."""


class InventoryUpdate(Wire):
    type: Literal["inventory"] = "inventory"
    inventory: Inventory


class Welcome(Wire):
    type: Literal["welcome"] = "welcome"
    node_id: Name
    heartbeat_seconds: Annotated[float, Field(gt=0, le=3600)]


class AssignmentMessage(Wire):
    type: Literal["assignment"] = "assignment"
    assignment: Assignment


ClientMessage = Annotated[Hello | Heartbeat | InventoryUpdate, Field(discriminator="type")]
ServerMessage = Annotated[Welcome | AssignmentMessage, Field(discriminator="type")]
_client: TypeAdapter[Hello | Heartbeat | InventoryUpdate] = TypeAdapter(ClientMessage)
_server: TypeAdapter[Welcome | AssignmentMessage] = TypeAdapter(ServerMessage)


def parse_client_message(data: str | bytes) -> Hello | Heartbeat | InventoryUpdate:
    """Validate a frame from bcd; raises ComputeError (the input boundary: not JSON, NUL,
    a lone surrogate, too deep, ...), pydantic.ValidationError or ValueError (too large)."""
    _check_size(data)
    return _client.validate_python(decode_json(data, limits=FRAME, what="a frame"))


def parse_server_message(data: str | bytes) -> Welcome | AssignmentMessage:
    """Validate a frame from the gateway; raises pydantic.ValidationError or ValueError (too large or refused
    by the input boundary)."""
    _check_size(data)
    try:
        value = decode_json(data, limits=FRAME, what="a frame")
    except ComputeError as exc:
        raise ValueError(str(exc)) from None
    return _server.validate_python(value)


def _check_size(data: str | bytes) -> None:
    size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {size} bytes is over the limit of {MAX_MESSAGE_BYTES}")
