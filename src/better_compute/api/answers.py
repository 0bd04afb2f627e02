"""JsonArray: a list route's answer, already encoded by ops (ops.views.RowViews).

FastAPI validates a route's return value against its response model before encoding it: for a
`list[View]` that is a copy of every row's dict, for data that is ours and already JSON. A route
that answers a JsonArray keeps `response_model=list[View]` for its OpenAPI document and sends the
bytes as they are; they are pydantic-core's encoding, which is what FastAPI would have sent.
"""

from __future__ import annotations

from starlette.responses import Response

__all__ = ["JsonArray"]


class JsonArray(Response):
    media_type = "application/json"
