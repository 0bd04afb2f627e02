"""Logging set-up for the better-compute processes, always through the redaction filter.

`configure_logging` gives the root logger one handler (stderr unless told otherwise)
whose filter removes every registered secret value, bearer token and token-shaped
string from the message, its arguments and its traceback. Library loggers (uvicorn,
sqlalchemy, httpx) propagate to the root and pass through the same filter.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from better_compute.core.redaction import RedactingFilter, install_redaction

__all__ = ["configure_logging"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: int | str = logging.INFO, *, stream: TextIO | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one redacting handler; returns it."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "better_compute", False):
            root.removeHandler(old)
            old.close()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RedactingFilter())
    handler.better_compute = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    install_redaction(root)
    logging.captureWarnings(True)
    return handler
