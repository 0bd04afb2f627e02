"""The store: SQLAlchemy 2 async on SQLite (one process) or PostgreSQL (any number)."""

from better_compute.store.base import Base, UTCDateTime
from better_compute.store.db import Database

__all__ = ["Base", "Database", "UTCDateTime"]
