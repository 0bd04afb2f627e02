"""Decoding the Kubernetes protobuf envelope, for the kinds kubectl sends that way.

kubectl 1.32 and later send `kubectl create configmap|secret|namespace|serviceaccount`
bodies as `application/vnd.kubernetes.protobuf`: the magic `k8s\\0`, then a
`runtime.Unknown` carrying apiVersion, kind and the object's own message. Only
the fields those commands set are decoded (names, labels, annotations,
finalizers, data); answers are always JSON, which those clients accept.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

from better_compute.testing.kube.status import KubeError

__all__ = ["PROTOBUF", "decode_protobuf"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(value: int | bytes) -> tuple[str, bytes]:
    key, item = "", b""
    for number, part in _fields(value if isinstance(value, bytes) else b""):
        if number == 1:
            key = _text(part)
        elif number == 2 and isinstance(part, bytes):
            item = part
    return key, item


def _metadata(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    simple = {1: "name", 2: "generateName", 3: "namespace"}
    for number, value in _fields(data):
        if number in simple:
            meta[simple[number]] = _text(value)
        elif number in (11, 12):
            key, item = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _config_map(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
        elif number == 2:
            key, item = _entry(value)
            obj.setdefault("data", {})[key] = item.decode()
        elif number == 3:
            key, item = _entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(item).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


def _secret(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
        elif number == 2:
            key, item = _entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            key, item = _entry(value)
            obj.setdefault("stringData", {})[key] = item.decode()
        elif number == 5:
            obj["immutable"] = bool(value)
    return obj


def _namespace(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
    return obj


def _service_account(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
        elif number == 3 and isinstance(value, bytes):
            name = next((_text(v) for n, v in _fields(value) if n == 1), "")
            obj.setdefault("imagePullSecrets", []).append({"name": name})
        elif number == 4:
            obj["automountServiceAccountToken"] = bool(value)
    return obj


_DECODERS: dict[tuple[str, str], Callable[[bytes], dict[str, Any]]] = {
    ("v1", "ConfigMap"): _config_map,
    ("v1", "Secret"): _secret,
    ("v1", "Namespace"): _namespace,
    ("v1", "ServiceAccount"): _service_account,
}


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object; 415 for kinds not decoded here."""
    if not body.startswith(_MAGIC):
        raise KubeError.bad_request("protobuf body without the k8s envelope")
    try:
        api_version = kind = ""
        raw = b""
        for number, value in _fields(body[len(_MAGIC) :]):
            if number == 1 and isinstance(value, bytes):
                for inner, part in _fields(value):
                    if inner == 1:
                        api_version = _text(part)
                    elif inner == 2:
                        kind = _text(part)
            elif number == 2 and isinstance(value, bytes):
                raw = value
        decoder = _DECODERS.get((api_version, kind))
        if decoder is None:
            raise KubeError.unsupported_media(f"{PROTOBUF} for {api_version} {kind}")
        obj = decoder(raw)
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise KubeError.bad_request(f"the protobuf body could not be decoded: {exc}") from exc
    obj.setdefault("metadata", {})
    return {"apiVersion": api_version, "kind": kind, **obj}
