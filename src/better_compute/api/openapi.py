"""The OpenAPI document as the API really answers: FastAPI's 422 becomes our 400.

Request validation errors are answered 400 with the error envelope (api/errors.py),
so the 422 and HTTPValidationError FastAPI adds to every route with parameters would
describe answers that never come.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

__all__ = ["install_openapi"]


def install_openapi(app: FastAPI) -> None:
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for item in schema.get("paths", {}).values():
                for operation in item.values():
                    if isinstance(operation, dict):
                        operation.get("responses", {}).pop("422", None)
            schemas = schema.get("components", {}).get("schemas", {})
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
