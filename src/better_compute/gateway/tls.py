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


_SSL_PROTOCOL_ATTRIBUTES = (
    "_app_protocol",
    "_app_protocol_is_buffer",
    "_app_reading_paused",
    "_app_state",
    "_app_transport",
    "_app_transport_created",
    "_app_writing_paused",
    "_conn_lost",
    "_eof_received",
    "_extra",
    "_handshake_start_time",
    "_handshake_timeout_handle",
    "_incoming",
    "_incoming_high_water",
    "_incoming_low_water",
    "_loop",
    "_outgoing",
    "_outgoing_high_water",
    "_outgoing_low_water",
    "_server_hostname",
    "_server_side",
    "_shutdown_timeout_handle",
    "_ssl_buffer",
    "_ssl_buffer_view",
    "_ssl_handshake_timeout",
    "_ssl_reading_paused",
    "_ssl_shutdown_timeout",
    "_ssl_writing_paused",
    "_sslcontext",
    "_sslobj",
    "_state",
    "_transport",
    "_waiter",
    "_write_backlog",
    "_write_buffer_size",
)
"""What 3.11's SSLProtocol sets on each instance: slots in the subclass, so no instance holds a dict of 34 keys."""


def _shared_buffer_protocol(base: Any) -> type:
    # The base's class-level defaults (read before __init__ sets them) are set on each instance first.
    defaults = {name: getattr(base, name) for name in _SSL_PROTOCOL_ATTRIBUTES if hasattr(base, name)}

    class SharedBufferSSLProtocol(base):  # type: ignore[misc]
        __slots__ = _SSL_PROTOCOL_ATTRIBUTES
        _bc_shared_buffer = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            for name, value in defaults.items():
                setattr(self, name, value)
            super().__init__(*args, **kwargs)
            if not hasattr(self, "_ssl_buffer_view"):  # not the protocol this was written for: leave it be
                return
            # The connection's own buffer goes at once; get_buffer hands out the thread's.
            self._ssl_buffer = self._ssl_buffer_view = _NO_BUFFER
            if type(getattr(self, "_write_backlog", None)) is collections.deque:
                self._write_backlog: list[bytes] = []  # see share_tls_read_buffer

        def get_buffer(self, n: int) -> memoryview:
            if not hasattr(self, "_ssl_buffer_view"):
                return super().get_buffer(n)  # type: ignore[no-any-return]
            want = n if 0 < n <= self.max_size else self.max_size
            # buffer_updated() reads `_ssl_buffer_view`: it is the thread's buffer until the next read.
            view = self._ssl_buffer_view = _thread_buffer(want)
            return view

    SharedBufferSSLProtocol.__qualname__ = SharedBufferSSLProtocol.__name__
    return SharedBufferSSLProtocol


def share_tls_read_buffer() -> bool:
    """Make asyncio's TLS connections read through one buffer per thread instead of one each.

    asyncio makes each TLS connection's protocol as `sslproto.SSLProtocol(...)`; that name
    becomes a subclass that reads through the thread's buffer and keeps its attributes in
    slots (3.11's protocol sets 34 of them, which took a 1.6 KiB dict per connection).
    Connections made before keep the class they were made with.

    Each connection's write backlog, a deque in 3.11 (760 bytes however empty, and it is
    empty but for the moment a write is handed to OpenSSL), becomes a list: the protocol only
    appends to it, reads, replaces and deletes its first item, tests it for emptiness and
    clears it, which a list does the same (and for a backlog of a few frames, as fast).

    Done once per process (idempotent); returns whether it is in place. It is left out
    where the SSLProtocol is not the one this was written against (3.11's buffered
    protocol with `_ssl_buffer_view`) or the loop may read in the background (Windows).
    """
    if tls_read_buffer_shared():
        return True
    protocol: Any = sslproto.SSLProtocol
    if sys.platform == "win32" or not all(hasattr(protocol, name) for name in ("get_buffer", "buffer_updated")):
        return False
    setattr(sslproto, "SSLProtocol", _shared_buffer_protocol(protocol))  # noqa: B010 - a module's class, replaced
    return True
