"""Keep asyncio's TLS read buffer small, so that an idle node connection costs little memory.

asyncio gives every TLS connection a socket read buffer of `SSLProtocol.max_size`
(256 KiB in CPython 3.11), allocated and zero-filled up front: at a thousand connected
nodes that alone is 250 MiB of a gateway's memory, for connections that carry a
heartbeat every ten seconds. A TLS record holds at most 16 KiB, so a 16 KiB buffer still
reads a whole record per call; bench/gateway.py measured 385 KiB of gateway RSS per
connected node before, 109 KiB after. This is a process-wide class attribute: it makes
any asyncio TLS stream in the process read at most 16 KiB per call, which costs bulk
transfers a little throughput and nothing else.
"""

from __future__ import annotations

from asyncio import sslproto

__all__ = ["TLS_READ_BUFFER", "limit_tls_read_buffer"]

TLS_READ_BUFFER = 16 * 1024


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Lower asyncio's per-connection TLS read buffer to `size` (never raise it)."""
    if sslproto.SSLProtocol.max_size > size:
        sslproto.SSLProtocol.max_size = size
