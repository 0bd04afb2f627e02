"""Hand the heap a reconnect storm freed back to the operating system.

While thousands of nodes connect at once, each TLS handshake, hello and session open
allocates and frees its working memory between the long-lived parts of the connections
around it. glibc's malloc keeps those freed pages (it only gives back the top of its heap
by itself), so after a storm the gateway's RSS stays about 20 KiB per connected node
above what is live (bench/gateway.py). `malloc_trim(0)` returns every free page, from the
middle of the heap too; the hub calls it after its tick once RELEASE_AFTER_SESSIONS
sessions have opened since the last time, in a worker thread (ctypes lets go of the GIL,
and malloc locks its own arenas), so the event loop goes on meanwhile. Elsewhere than
glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

__all__ = ["RELEASE_AFTER_SESSIONS", "release_free_memory"]

log = logging.getLogger(__name__)

RELEASE_AFTER_SESSIONS = 256
"""Sessions opened between two releases of freed memory: a storm, not a node now and then."""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Give malloc's free pages back to the OS; returns whether this C library can."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
