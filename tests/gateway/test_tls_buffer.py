"""The TLS read buffer the gateway shares between connections (gateway/tls.py): bytes still arrive whole."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from asyncio import sslproto

from better_compute.gateway.tls import TLS_READ_BUFFER, limit_tls_read_buffer, share_tls_read_buffer

from .conftest import Tls

CLIENTS = 4
BYTES = 512 * 1024  # 32 reads of 16 KiB each, the clients' records interleaved at the server


async def test_connections_read_through_one_buffer_and_every_byte_arrives_in_order(tls: Tls) -> None:
    limit_tls_read_buffer()
    assert share_tls_read_buffer()
    assert share_tls_read_buffer()  # once per process: a second call changes nothing
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tls.cert_file)
    protocols: list[sslproto.SSLProtocol] = []

    async def echo_digest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        protocols.append(writer.transport._ssl_protocol)  # type: ignore[attr-defined]
        data = await reader.readexactly(BYTES)
        writer.write(hashlib.sha256(data).digest())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo_digest, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    client_context = ssl.create_default_context(cafile=str(tls.ca_file))

    async def client(n: int) -> tuple[bytes, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context)
        payload = bytes([n]) * (BYTES // 2) + bytes(range(256)) * (BYTES // 512)
        for start in range(0, BYTES, 8192):  # small writes, so that the connections' reads interleave
            writer.write(payload[start : start + 8192])
            await writer.drain()
        digest = await reader.readexactly(32)
        writer.close()
        return hashlib.sha256(payload).digest(), digest

    async with server:
        results = await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    assert [sent for sent, _ in results] == [echoed for _, echoed in results]
    assert len(protocols) == CLIENTS
    # No connection keeps a read buffer of its own: each reads through the thread's one.
    assert {len(p._ssl_buffer) for p in protocols} == {0}  # type: ignore[attr-defined]
    assert len({id(p._ssl_buffer_view) for p in protocols}) == 1  # type: ignore[attr-defined]
    assert len(protocols[0]._ssl_buffer_view) == TLS_READ_BUFFER  # type: ignore[attr-defined]
    # Nor a 760-byte deque for a write backlog that is empty between writes: a list.
    assert {type(p._write_backlog) for p in protocols} == {list}  # type: ignore[attr-defined]
    # And no dict of 34 attributes: each is a slot.
    assert [vars(p) for p in protocols] == [{}] * CLIENTS


async def test_what_the_server_writes_arrives_whole_through_the_list_backlog(tls: Tls) -> None:
    limit_tls_read_buffer()
    assert share_tls_read_buffer()
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tls.cert_file)
    payload = bytes(range(256)) * (BYTES // 256)

    async def send_payload(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert type(writer.transport._ssl_protocol._write_backlog) is list  # type: ignore[attr-defined]
        for start in range(0, BYTES, 8192):  # many writes, the client reading as they come
            writer.write(payload[start : start + 8192])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(send_payload, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ssl.create_default_context(cafile=str(tls.ca_file))
        )
        received = await reader.readexactly(BYTES)
        writer.close()
    assert hashlib.sha256(received).digest() == hashlib.sha256(payload).digest()
