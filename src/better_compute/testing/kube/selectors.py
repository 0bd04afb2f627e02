"""`labelSelector` and `fieldSelector` as the API server parses them.

Label terms: `a=b`, `a==b`, `a!=b`, `k in (x,y)`, `k notin (x)`, `k`, `!k`;
commas outside parentheses mean AND. Field selectors take `=`, `==` and `!=` on
the fields each kind supports; any other field is a 400, as on the real server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.testing.kube.resources import ResourceType
from better_compute.testing.kube.status import KubeError

__all__ = [
    "FieldTerm",
    "LabelTerm",
    "match_fields",
    "match_labels",
    "parse_field_selector",
    "parse_label_selector",
    "selector_matches",
]


@dataclass(frozen=True)
class LabelTerm:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "=":
                return present and value == self.values[0]
            case "!=":
                return not present or value != self.values[0]
            case "in":
                return present and value in self.values
            case "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case _:
                return not present


def _split_terms(selector: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current = ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current.strip())
    return terms


def parse_label_selector(selector: str) -> list[LabelTerm]:
    """Parse a selector string; a malformed one is a 400 BadRequest."""
    terms: list[LabelTerm] = []
    for raw in _split_terms(selector):
        terms.append(_parse_label_term(raw, selector))
    return terms


def _parse_label_term(raw: str, selector: str) -> LabelTerm:
    words = raw.split()
    if len(words) >= 2 and words[1] in ("in", "notin"):
        rest = raw.split(None, 2)[2].strip() if len(words) > 2 else ""
        if not (rest.startswith("(") and rest.endswith(")")):
            raise KubeError.bad_request(f"unable to parse requirement: found '{rest}', expected: '('")
        values = tuple(v.strip() for v in rest[1:-1].split(",") if v.strip())
        return LabelTerm(words[0], words[1], values)
    for operator in ("!=", "==", "="):
        if operator in raw:
            key, value = raw.split(operator, 1)
            return LabelTerm(_valid_key(key.strip(), selector), "!=" if operator == "!=" else "=", (value.strip(),))
    if raw.startswith("!"):
        return LabelTerm(_valid_key(raw[1:].strip(), selector), "!exists")
    return LabelTerm(_valid_key(raw, selector), "exists")


def _valid_key(key: str, selector: str) -> str:
    if not key or " " in key or "(" in key or ")" in key:
        raise KubeError.bad_request(f"unable to parse requirement: invalid label key in selector {selector!r}")
    return key


def match_labels(terms: list[LabelTerm], obj: Mapping[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(term.matches(labels) for term in terms)


@dataclass(frozen=True)
class FieldTerm:
    field: str
    value: str
    equal: bool


_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a metav1.LabelSelector (`matchLabels`, `matchExpressions`) selects `labels`; `{}` selects all."""
    terms = [LabelTerm(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        operator = _OPERATORS.get(expr.get("operator", ""))
        if operator is None:
            return False
        terms.append(LabelTerm(expr.get("key", ""), operator, tuple(expr.get("values") or ())))
    return all(term.matches(labels) for term in terms)


def _path(*keys: str) -> Callable[[Mapping[str, Any]], str]:
    def read(obj: Mapping[str, Any]) -> str:
        current: Any = obj
        for key in keys:
            current = current.get(key) if isinstance(current, Mapping) else None
        if current is None:
            return ""
        if isinstance(current, bool):
            return "true" if current else "false"
        return str(current)

    return read


_COMMON: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}
_EXTRA: dict[str, dict[str, Callable[[Mapping[str, Any]], str]]] = {
    "pods": {
        "spec.nodeName": _path("spec", "nodeName"),
        "status.phase": _path("status", "phase"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
    },
    "nodes": {"spec.unschedulable": _path("spec", "unschedulable")},
    "secrets": {"type": _path("type")},
    "namespaces": {"status.phase": _path("status", "phase")},
    "events": {
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "reason": _path("reason"),
        "type": _path("type"),
    },
}


def parse_field_selector(selector: str, rt: ResourceType) -> list[FieldTerm]:
    terms: list[FieldTerm] = []
    supported = {**_COMMON, **_EXTRA.get(rt.plural, {})}
    for raw in _split_terms(selector):
        for operator in ("!=", "==", "="):
            if operator in raw:
                field, value = (part.strip() for part in raw.split(operator, 1))
                break
        else:
            raise KubeError.bad_request(f"invalid selector: '{selector}'; can't understand '{raw}'")
        if field not in supported:
            raise KubeError.bad_request(f"field label not supported: {field}")
        terms.append(FieldTerm(field, value, operator != "!="))
    return terms


def match_fields(terms: list[FieldTerm], rt: ResourceType, obj: Mapping[str, Any]) -> bool:
    supported = {**_COMMON, **_EXTRA.get(rt.plural, {})}
    return all((supported[t.field](obj) == t.value) == t.equal for t in terms)
