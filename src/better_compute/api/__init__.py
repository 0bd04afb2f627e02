"""The HTTP API: one FastAPI app over the Compute's services and its modules' routers."""

from better_compute.api.app import create_app

__all__ = ["create_app"]
