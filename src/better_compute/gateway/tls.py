"""Keep asyncio's TLS read buffer small and shared, so that an idle node connection costs little memory.

asyncio gives every TLS connection a socket read buffer of `SSLProtocol.max_size`
(256 KiB in CPython 3.11), allocated and zero-filled up front: at a thousand connected
nodes that alone is 250 MiB of a gateway's memory, for connections that carry a
heartbeat every ten seconds. A TLS record holds at most 16 KiB, so a 16 KiB buffer still
reads a whole record per call; bench/gateway.py measured 385 KiB of gateway RSS per
connected node before, 109 KiB after. This is a process-wide class attribute: it makes
any asyncio TLS stream in the process read at most 16 KiB per call, which costs bulk
transfers a little throughput and nothing else.

Even 16 KiB a connection is most of what an idle node costs, and the buffer is only ever
used between a socket being readable and the bytes read being copied into OpenSSL: the
selector transport calls `get_buffer()`, `recv_into()` that buffer and `buffer_updated()`
in one synchronous step, and `buffer_updated()` first copies the bytes into the
connection's incoming BIO. So one buffer per thread serves every connection of the
thread's event loop (`share_tls_read_buffer`). Windows' proactor loop reads into the
buffer in the background, so it keeps one per connection; uvloop has its own TLS and is
not touched.
"""

from __future__ import annotations

import collections
import sys
import threading
from asyncio import sslproto
from typing import Any

__all__ = ["TLS_READ_BUFFER", "limit_tls_read_buffer", "share_tls_read_buffer", "tls_read_buffer_shared"]

TLS_READ_BUFFER = 16 * 1024

_NO_BUFFER = memoryview(bytearray())
_per_thread = threading.local()


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Lower asyncio's per-connection TLS read buffer to `size` (never raise it)."""
    if sslproto.SSLProtocol.max_size > size:
        sslproto.SSLProtocol.max_size = size


def _thread_buffer(size: int) -> memoryview:
    view: memoryview | None = getattr(_per_thread, "view", None)
    if view is None or len(view) < size:
        view = _per_thread.view = memoryview(bytearray(size))
    return view


def tls_read_buffer_shared() -> bool:
    """Whether asyncio's TLS connections read through one buffer per thread."""
    return getattr(sslproto.SSLProtocol, "_bc_shared_buffer", False)


def share_tls_read_buffer() -> bool:
    """Make asyncio's TLS connections read through one buffer per thread instead of one each.

    Each connection's write backlog, a deque in 3.11 (760 bytes however empty, and it is
    empty but for the moment a write is handed to OpenSSL), becomes a list: the protocol only
    appends to it, reads, replaces and deletes its first item, tests it for emptiness and
    clears it, which a list does the same (and for a backlog of a few frames, as fast).

    Done once per process (idempotent); returns whether it is in place. It is left out
    where the SSLProtocol is not the one this was written against (3.11's buffered
    protocol with `_ssl_buffer_view`) or the loop may read in the background (Windows).
    """
    protocol: Any = sslproto.SSLProtocol
    if tls_read_buffer_shared():
        return True
    if sys.platform == "win32" or not all(hasattr(protocol, name) for name in ("get_buffer", "buffer_updated")):
        return False
    original_init = protocol.__init__
    original_get_buffer = protocol.get_buffer

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if not hasattr(self, "_ssl_buffer_view"):  # not the protocol this was written for: leave it be
            return
        # The connection's own buffer goes at once; get_buffer hands out the thread's.
        self._ssl_buffer = self._ssl_buffer_view = _NO_BUFFER
        if type(getattr(self, "_write_backlog", None)) is collections.deque:
            self._write_backlog = []  # see share_tls_read_buffer

    def get_buffer(self: Any, n: int) -> memoryview:
        if not hasattr(self, "_ssl_buffer_view"):
            return original_get_buffer(self, n)  # type: ignore[no-any-return]
        want = n if 0 < n <= self.max_size else self.max_size
        # buffer_updated() reads `_ssl_buffer_view`: it is the thread's buffer until the next read.
        view = self._ssl_buffer_view = _thread_buffer(want)
        return view

    protocol.__init__ = __init__
    protocol.get_buffer = get_buffer
    protocol._bc_shared_buffer = True
    return True
