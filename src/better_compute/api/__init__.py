"""The HTTP API: FastAPI routers over the modules' services."""
