"""The GKE driver speaks to Google only through google-cloud-container and google-auth: no hand-made HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import better_compute.providers.gcp as gcp

HTTP_LIBRARIES = {"httpx", "httpx2", "urllib", "urllib3", "aiohttp", "http"}


def test_no_module_of_the_driver_makes_http_requests_itself() -> None:
    for path in Path(gcp.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                roots = {name.split(".")[0] for name in names}
                assert not roots & HTTP_LIBRARIES, f"{path.name} imports {roots & HTTP_LIBRARIES}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
                if isinstance(target, ast.Name) and target.id == "requests":
                    assert node.func.attr in {"Session"}, f"{path.name} calls requests.{node.func.attr}"
