"""A control plane's HTTP API and node gateway on loopback, over TLS with a pinned key.

It listens from the moment the Cloud starts, so its URLs and pin can go into the
substrate agent before the Compute exists; `serve(app)` then hands it the app
(`better_compute.api.create_app(compute)`). Requests before that answer 503.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import trustme
from starlette.responses import JSONResponse

from better_compute.bcd.pins import spki_pin
from better_compute.kubernetes.agent import SubstrateAgent, substrate_agent
from better_compute.testing.lifecycle import StartStop
from better_compute.testing.loopback import LoopbackServer

__all__ = ["ControlPlaneServer"]

BCD_IMAGE = "ghcr.io/better-compute/bcd:dev"


class ControlPlaneServer(StartStop):
    def __init__(self) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self._dir = Path(tempfile.mkdtemp(prefix="control-plane-"))
        pem = self._dir / "server.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
        self.ca_pem = ca.cert_pem.bytes().decode()
        self.pin = spki_pin(cert.cert_chain_pems[0].bytes())
        self._app: Any = None
        self._server = LoopbackServer(self, certfile=str(pem), keyfile=str(pem), name="control-plane")

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def gateway_url(self) -> str:
        return self._server.url.replace("https://", "wss://")

    def agent(self, image: str = BCD_IMAGE) -> SubstrateAgent:
        """The substrate agent that points bcd at this control plane (its pin, its CA)."""
        return substrate_agent(
            image=image, gateway_url=self.gateway_url, pins=(self.pin,), control_plane_url=self.url, ca_pem=self.ca_pem
        )

    def serve(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._app is not None:
            await self._app(scope, receive, send)
        elif scope["type"] == "http":
            body = {"error": {"code": "UNAVAILABLE", "message": "no control plane is served here yet"}}
            await JSONResponse(body, status_code=503)(scope, receive, send)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
