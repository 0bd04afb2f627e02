"""`serve` shuts down while a console tab holds /ui/events open: uvicorn waits for open responses before the
lifespan ends, so the stream must end as the shutdown starts (api.serving.Server), not hold Ctrl-C for ever."""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
from pathlib import Path

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
from ops_world import SECRET, seed

from better_compute.api import create_app
from better_compute.api.serving import Server
from better_compute.core.clock import SimClock
from better_compute.fleet import fleet_module
from better_compute.server import better_compute
from better_compute.vps import vps


async def test_serve_stops_with_a_console_stream_open(sqlite_template: Path, tmp_path: Path) -> None:
    shutil.copy(sqlite_template, tmp_path / "console.db")
    url = f"sqlite:///{tmp_path / 'console.db'}"
    compute = better_compute(database=url, secret=SECRET, modules=[vps(), fleet_module()], clock=SimClock())
    app = create_app(compute)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # connections wait in the backlog until the server accepts them
    server = Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            # The first request is answered once the lifespan has started the Compute.
            assert (await client.get("/healthz")).status_code == 200
            world = await seed(compute)
            _, key = await compute.iam.create_api_key(world.tenant_id)
            form = (await client.get("/ui/sign-in")).text
            csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            assert (await client.post("/ui/sign-in", data={"api_key": key, "csrf": csrf})).status_code == 303
            async with client.stream("GET", "/ui/events") as stream:
                chunks = stream.aiter_bytes()
                assert await anext(chunks) == b"retry: 2000\n\n"
                server.should_exit = True
                async with asyncio.timeout(10):
                    await asyncio.shield(serving)  # with uvicorn.Server: still serving after 10 s
                assert [chunk async for chunk in chunks] == []  # the stream ended cleanly
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await serving
        sock.close()
