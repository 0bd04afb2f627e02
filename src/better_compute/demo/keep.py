"""`--keep`: after the story, the world keeps serving, and the environment to use it is printed.

A person (or a test) then runs `better-compute substrates get`, `fleet plan` and the HTTP API
against it. The CLI builds its own control plane from these variables, talking to the same
database and to the emulators with the credentials each provider's SDK reads the usual
way: an application default credentials file for Google, the AWS variables, and the
DigitalOcean token as the secret reference already in the document.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal

from better_compute.demo.world import TENANT, DemoWorld
from better_compute.store.sqlite_lock import SHARED_ENV

__all__ = ["environment", "example_commands", "serve_until_stopped", "shell_lines"]

TICK_SECONDS = 0.5
"""Real seconds between steps while kept: simulated time runs about 40 times faster than real time."""


async def environment(world: DemoWorld) -> dict[str, str]:
    """The variables that point the CLI, the SDKs and curl at the kept world (writes the files they name)."""
    cloud, directory = world.cloud, world.directory
    adc = directory / "google-adc.json"
    credentials = cloud.gke.google_credentials()
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": credentials.client_id,
                "client_secret": credentials.client_secret,
                "refresh_token": credentials.refresh_token,
                "token_uri": credentials.token_uri,
            }
        )
    )
    adc.chmod(0o600)
    ca = directory / "control-plane-ca.pem"
    ca.write_text(cloud.control_plane.ca_pem)
    _, api_key = await world.compute.iam.create_api_key(world.tenant_id)
    return {
        "BC_DATABASE_URL": world.database_url,
        "BC_SECRET": world.server_secret,
        "BC_TENANT": TENANT,
        "BC_BASE_URL": cloud.control_plane.url,
        "BC_GKE_ENDPOINT": cloud.gke.url,
        "BC_EKS_ENDPOINT": cloud.eks.url,
        "BC_DOKS_ENDPOINT": cloud.doks.url,
        "GOOGLE_APPLICATION_CREDENTIALS": str(adc),
        "AWS_ACCESS_KEY_ID": cloud.eks.access_key_id,
        "AWS_SECRET_ACCESS_KEY": cloud.eks.secret_access_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "BC_DEMO_FLEET": str(world.write_document()),
        "BC_API_KEY": api_key,
        "BC_CONSOLE_URL": f"{cloud.control_plane.url}/ui/",  # the web console: sign in with BC_API_KEY
        "CURL_CA_BUNDLE": str(ca),
        "BC_CONTROL_PLANE_CA_FILE": str(ca),
        # The CLI opens the demo's SQLite file beside the demo itself, which keeps serving it; the
        # commands shown read, or apply a fleet that changes nothing, so sharing the file is safe here.
        SHARED_ENV: "1",
    }


async def serve_until_stopped(world: DemoWorld) -> None:
    """Keep simulated time running (the engine, the emulators, bcd) until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        while not stop.is_set():
            await world.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_SECONDS)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def shell_lines(variables: dict[str, str]) -> list[str]:
    """`export NAME='value'` lines a shell can `eval`."""
    return [f"export {name}='{value}'" for name, value in variables.items()]


def example_commands() -> list[str]:
    """What to try against the kept world, once the variables are exported."""
    return [
        "better-compute substrates get gke-h100",
        "better-compute fleet plan $BC_DEMO_FLEET",
        "better-compute doctor",
        'curl -s -H "Authorization: Bearer $BC_API_KEY" $BC_BASE_URL/v1/pools/doks-h100/kubernetes-substrate',
        "open $BC_CONSOLE_URL in a browser that trusts $CURL_CA_BUNDLE, and sign in with $BC_API_KEY",
    ]
