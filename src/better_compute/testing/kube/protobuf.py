"""Decoding Kubernetes protobuf request bodies, for every kind the emulator serves.

A protobuf body is the magic `k8s\\0`, then a `runtime.Unknown` carrying the
apiVersion, the kind and the object's own message. The message type comes from
the generated stubs (proto/*.proto, the published field numbers), and one
descriptor walk turns any of them into the object's JSON form, with the
Kubernetes wire types (Time, IntOrString, Quantity, FieldsV1, RawExtension)
written as their JSON does. A body with fields the messages do not model is a
400, never silently trimmed; a kind the emulator does not serve is a 415. Answers are always JSON, which every client accepts.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from better_compute.testing.kube.proto import (
    admissionregistration_pb2,
    apps_pb2,
    authentication_pb2,
    authorization_pb2,
    core_pb2,
    meta_pb2,
    policy_pb2,
    rbac_pb2,
)
from better_compute.testing.kube.resources import find_kind
from better_compute.testing.kube.status import KubeError

__all__ = ["PROTOBUF", "decode_protobuf", "message_class"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"

# apiVersion -> the generated module holding that group-version's kinds, by kind name
_MODULES: dict[str, Any] = {
    "v1": core_pb2,
    "apps/v1": apps_pb2,
    "admissionregistration.k8s.io/v1": admissionregistration_pb2,
    "rbac.authorization.k8s.io/v1": rbac_pb2,
    "authentication.k8s.io/v1": authentication_pb2,
    "authentication.k8s.io/v1beta1": authentication_pb2,
    "authorization.k8s.io/v1": authorization_pb2,
    "policy/v1": policy_pb2,
    "policy/v1beta1": policy_pb2,
}
# bodies of subresources, which are not kinds of their own in the resource table
_SUBRESOURCE_KINDS = frozenset({"TokenRequest", "Eviction"})
_META = "bckube.meta."


def message_class(api_version: str, kind: str) -> type[Message] | None:
    """The generated message for a kind's protobuf body, or None when the emulator takes it as JSON only."""
    if kind == "DeleteOptions":  # registered in every group-version
        return meta_pb2.DeleteOptions
    module = _MODULES.get(api_version)
    if module is None or (kind not in _SUBRESOURCE_KINDS and find_kind(api_version, kind) is None):
        return None
    found = getattr(module, kind, None)
    return found if isinstance(found, type) and issubclass(found, Message) else None


def _time(message: Message) -> str | None:
    seconds = int(getattr(message, "seconds"))  # noqa: B009 (generated attribute)
    if seconds <= 0:  # Go's zero time: JSON null
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _special(message: Message) -> tuple[bool, Any]:
    """The JSON form of the wire types whose JSON is not their message's fields."""
    name = message.DESCRIPTOR.full_name.removeprefix(_META)
    if name in ("Time", "MicroTime"):
        return True, _time(message)
    if name == "IntOrString":
        return True, getattr(message, "strVal") if getattr(message, "type") == 1 else getattr(message, "intVal")  # noqa: B009
    if name == "Quantity":
        return True, getattr(message, "string")  # noqa: B009
    if name in ("FieldsV1", "RawExtension"):
        raw = getattr(message, "Raw" if name == "FieldsV1" else "raw")
        return True, json.loads(raw) if raw else None
    return False, None


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _to_json(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _to_json(message: Message) -> Any:
    special, value = _special(message)
    if special:
        return value
    unknown = UnknownFieldSet(message)
    if len(unknown):
        numbers = ", ".join(str(unknown[i].field_number) for i in range(len(unknown)))
        raise KubeError.bad_request(
            f"the protobuf body carries fields of {message.DESCRIPTOR.name} that the Kubernetes API emulator "
            f"does not model (field numbers {numbers}); send it as JSON"
        )
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _scalar(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_scalar(field, v) for v in value]
        elif field.type == FieldDescriptor.TYPE_STRING and value == "":
            continue  # Go writes empty strings that its JSON omits
        elif field.full_name == f"{_META}ObjectMeta.generation" and value == 0:
            continue
        else:
            out[field.name] = _scalar(field, value)
    return out


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object: 400 when it cannot be read, 415 for kinds without a message."""
    if not body.startswith(_MAGIC):
        raise KubeError.bad_request("protobuf body without the k8s envelope")
    try:
        envelope = meta_pb2.Unknown.FromString(body[len(_MAGIC) :])
        api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind
        found = message_class(api_version, kind)
        if found is None:
            raise KubeError.unsupported_media(f"{PROTOBUF} for {api_version} {kind}")
        obj = _to_json(found.FromString(envelope.raw))
    except (DecodeError, ValueError, UnicodeDecodeError) as exc:
        raise KubeError.bad_request(f"the protobuf body could not be decoded: {exc}") from exc
    obj.setdefault("metadata", {})
    return {"apiVersion": api_version, "kind": kind, **obj}
