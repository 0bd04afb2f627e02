"""The OpenAPI document as the API really answers.

- FastAPI's 422 becomes our 400: request validation errors are answered 400 with the
  error envelope (api/errors.py), so the 422 and HTTPValidationError FastAPI adds to
  every route with parameters would describe answers that never come.
- Routes that read their body through the input boundary describe it with
  `core.http.json_body`; the schemas it refers to move to `components.schemas`.
- The security scheme: `Authorization: Bearer <api key>` on every route but the public
  ones (health, metrics, the API's own description, the node gateway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from better_compute.core.http import COMPONENTS_KEY

__all__ = ["SECURITY_SCHEME", "install_openapi"]

SECURITY_SCHEME = "apiKey"


def install_openapi(app: FastAPI, *, public: tuple[str, ...] = ()) -> None:
    generate: Callable[[], dict[str, Any]] = app.openapi
    open_prefixes = tuple(p.rstrip("/") for p in public)

    def is_public(path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in open_prefixes)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            components = schema.setdefault("components", {})
            schemas = components.setdefault("schemas", {})
            for path, item in schema.get("paths", {}).items():
                for operation in item.values():
                    if isinstance(operation, dict):
                        operation.get("responses", {}).pop("422", None)
                        for name, definition in operation.pop(COMPONENTS_KEY, {}).items():
                            schemas.setdefault(name, definition)
                        if is_public(path):
                            operation["security"] = []
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
            components["securitySchemes"] = {
                SECURITY_SCHEME: {"type": "http", "scheme": "bearer", "description": "an API key of your tenant"}
            }
            schema["security"] = [{SECURITY_SCHEME: []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
