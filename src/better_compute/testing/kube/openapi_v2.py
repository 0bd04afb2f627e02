"""`/openapi/v2` as the protobuf document (gnostic `openapi.v2.Document`) kubectl 1.27-1.28 read.

Those kubectl versions decide whether the server validates fields by looking
through the v2 document for the kind's PATCH operation (tagged with the
`x-kubernetes-group-version-kind` vendor extension) and its `fieldValidation`
query parameter; a server without `/openapi/v2` makes `kubectl apply` fail
before it sends anything. Only those parts are encoded: no schemas. Field
numbers follow gnostic's OpenAPIv2.proto.
"""

from __future__ import annotations

from collections.abc import Sequence

from better_compute.testing.kube.resources import ResourceType

__all__ = ["OPENAPI_V2_PROTOBUF", "openapi_v2_document"]

OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_QUERY = ("fieldValidation", "fieldManager", "force", "dryRun")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode())


def _query_parameter(name: str) -> bytes:
    sub_schema = _text(2, "query") + _text(4, name) + _text(6, "string")  # in, name, type
    non_body = _field(3, sub_schema)  # query_parameter_sub_schema
    parameter = _field(2, non_body)  # non_body_parameter
    return _field(8, _field(1, parameter))  # Operation.parameters: ParametersItem.parameter


def _patch_operation(group: str, version: str, kind: str) -> bytes:
    gvk = f"group: {group!r}\nkind: {kind}\nversion: {version}\n"
    extension = _text(1, "x-kubernetes-group-version-kind") + _field(2, _text(2, gvk))  # NamedAny{name, Any{yaml}}
    operation = _text(5, f"patch{kind}") + b"".join(_query_parameter(q) for q in _QUERY) + _field(13, extension)
    return _field(8, operation)  # PathItem.patch


def openapi_v2_document(server_version: str, served: Sequence[ResourceType]) -> bytes:
    paths = b""
    for rt in (r for r in served if r.stored):
        prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        named = _text(1, f"{prefix}{scope}/{rt.plural}/{{name}}") + _field(
            2, _patch_operation(rt.group, rt.version, rt.kind)
        )
        paths += _field(2, named)  # Paths.path: NamedPathItem
    info = _text(1, "Kubernetes") + _text(2, f"v{server_version}")
    return _text(1, "2.0") + _field(2, info) + _field(8, paths)
