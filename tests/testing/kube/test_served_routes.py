"""docs/testing.md's table of what the Kubernetes API emulator serves is the truth: it matches the
resource table, and every route it lists answers while every route it lists as not served is a 404."""

from __future__ import annotations

import re
from pathlib import Path

import httpx2
import pytest

from better_compute.testing.kube.protobuf import message_class
from better_compute.testing.kube.resources import RESOURCES, ResourceType

DOC = Path(__file__).parents[3] / "docs" / "testing.md"
NOT_FOUND = "the server could not find the requested resource"
_SUBRESOURCE_KINDS = {
    "token": ("authentication.k8s.io/v1", "TokenRequest", "create"),
    "eviction": ("policy/v1", "Eviction", "create"),
    "log": ("v1", "(text/plain)", "get"),
}


def _section(name: str) -> str:
    text = DOC.read_text()
    match = re.search(rf"<!-- {name} -->\n(.*?)<!-- end {name} -->", text, re.S)
    assert match, f"docs/testing.md has no {name} section"
    return match.group(1)


def _path(rt: ResourceType) -> str:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
    return f"{prefix}/namespaces/{{ns}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"


def _rows() -> list[str]:
    rows = []
    for rt in RESOURCES:
        protobuf = "yes" if message_class(rt.api_version, rt.kind) else "no"
        rows.append(f"| `{_path(rt)}` | {rt.kind} | {' '.join(rt.verbs)} | {protobuf} |")
        for sub in rt.subresources:
            api_version, kind, verbs = _SUBRESOURCE_KINDS.get(sub, (rt.api_version, rt.kind, "get patch update"))
            protobuf = "yes" if message_class(api_version, kind) else "no"
            rows.append(f"| `{_path(rt)}/{{name}}/{sub}` | {kind} | {verbs} | {protobuf} |")
    return rows


def test_the_documented_table_is_the_served_table() -> None:
    documented = [line for line in _section("served-routes").splitlines() if line.startswith("| `")]
    assert documented == _rows()


def _documented_routes(section: str) -> list[str]:
    return re.findall(r"`(/[^`]*)`", _section(section))


async def test_every_documented_route_answers(raw: httpx2.AsyncClient) -> None:
    for route in _documented_routes("served-routes") + _documented_routes("served-paths"):
        path = route.replace("{ns}", "default").replace("{name}", "missing").lstrip("/")
        create_only = any(path.endswith(s) for s in ("token", "eviction", "reviews"))
        response = await (raw.post(path, json={}) if create_only else raw.get(path))
        assert not (response.status_code == 404 and NOT_FOUND in response.text), route


@pytest.mark.parametrize("route", _documented_routes("not-served-routes"))
async def test_every_route_documented_as_not_served_is_a_404(raw: httpx2.AsyncClient, route: str) -> None:
    response = await raw.get(route.replace("{ns}", "default").lstrip("/"))
    assert (response.status_code, response.json()["message"]) == (404, NOT_FOUND)
