"""The `bcd` command: join, run, inventory, pin. docs/bcd.md documents flags, environment and failures.

Every failure is one line, `bcd: error: ...`, with the exit status docs/bcd.md lists.
`bcd run` stops on SIGTERM (what the kubelet sends a pod) or SIGINT: it closes its gateway
session normally (close code 1000), logs it, and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import typer

from better_compute.bcd.agent import CredentialRefusedError, GatewayConfigError
from better_compute.bcd.config import (
    DEFAULT_IDENTITY_TOKEN_FILE,
    DEFAULT_KUBELET_SOCKET,
    DEFAULT_STATE_DIR,
    DEFAULT_TOKEN_FILE,
    BcdConfig,
)
from better_compute.bcd.credentials import NodeCredential
from better_compute.bcd.daemon import Bcd, NotJoinedError
from better_compute.bcd.health import nvml_module, with_health
from better_compute.bcd.inventory import InventoryError, await_inventory, read_inventory
from better_compute.bcd.join import JoinError, join
from better_compute.bcd.pins import PinMismatchError, spki_pin
from better_compute.bcd.runtime_config import RuntimeConfigError
from better_compute.core.clock import SystemClock
from better_compute.core.redaction import install_redaction

__all__ = ["app", "main"]

HELP = f"""better-compute node daemon.

Every setting comes from the environment; a flag overrides it.

\b
Environment (default):
  BCD_CONTROL_PLANE_URL  the control plane's base URL, for join (required by join)
  BCD_JOIN_TOKEN_FILE    the mounted join token ({DEFAULT_TOKEN_FILE})
  BCD_IDENTITY_TOKEN_FILE the pod's projected ServiceAccount token, for join ({DEFAULT_IDENTITY_TOKEN_FILE})
  BCD_STATE_DIR          where the node credential is kept ({DEFAULT_STATE_DIR})
  BCD_CA_FILE            CA bundle for the control plane and gateway (system CAs)
  BCD_GATEWAY_URL        the node gateway, wss://... (required by run)
  BCD_PINS               gateway SPKI pins, comma-separated (none: verify the chain)
  BCD_KUBELET_SOCKET     the kubelet's registration socket ({DEFAULT_KUBELET_SOCKET})
  BCD_RESOURCE_NAME      the extended resource advertised (nvidia.com/gpu)
  BCD_NVIDIA_RUNTIME_CONFIG the host's NVIDIA container runtime config.toml, as mounted (none)
  BCD_HOST_DRIVER_DIR    the host's NVIDIA driver directory, where there is no NVIDIA runtime (none)
  BCD_INSECURE_GATEWAY   1 allows ws:// (off; development only)
  BCD_INSECURE_JOIN      1 allows an http:// control plane for join (off; development only)
  NODE_NAME              the Kubernetes Node name (the hostname)
  BCD_SIMULATED_GPUS     e.g. 8xH100: simulated GPUs instead of NVML (none)
  BCD_HOSTNAME           overrides the hostname (the real one)
  BCD_OS_RELEASE         where the distribution name is read (/etc/os-release)
"""

app = typer.Typer(name="bcd", help=HELP, no_args_is_help=True, add_completion=False, rich_markup_mode=None)

log = logging.getLogger("better_compute.bcd")

EXIT_CREDENTIAL_REFUSED = 3

StateDir = Annotated[
    Path | None,
    typer.Option(help=f"Where the node credential is kept. Env BCD_STATE_DIR, default {DEFAULT_STATE_DIR}."),
]


def _config() -> BcdConfig:
    return BcdConfig.from_env(os.environ)


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"bcd: error: {message}", err=True)
    return typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bcd {version('better-compute')}")
        raise typer.Exit()


@app.callback()
def _setup(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging (default: info).")] = False,
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install_redaction()


@app.command("join")
def join_command(
    control_plane_url: Annotated[
        str | None, typer.Option(help="The control plane's base URL. Env BCD_CONTROL_PLANE_URL, required.")
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help=f"The mounted join token. Env BCD_JOIN_TOKEN_FILE, default {DEFAULT_TOKEN_FILE}."),
    ] = None,
    state_dir: StateDir = None,
    insecure_join: Annotated[
        bool,
        typer.Option(
            "--insecure-join",
            help="Allow an http:// control plane: the token travels in the clear (development only). "
            "Env BCD_INSECURE_JOIN=1, default off.",
        ),
    ] = False,
) -> None:
    """Redeem the join token once and keep the node credential (a joined node needs no token).

    On a GPU node whose driver is not loaded yet, it waits for the GPUs first, saying so.
    """
    config = _config().override(
        control_plane_url=control_plane_url,
        token_file=token_file,
        state_dir=state_dir,
        insecure_join=insecure_join or None,
    )

    async def joining() -> NodeCredential:
        clock = SystemClock()
        return await join(config, await await_inventory(os.environ, clock), clock=clock)

    try:
        credential = asyncio.run(joining())
    except (JoinError, InventoryError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"joined: node {credential.node_id} of pool {credential.pool_id}")


@app.command("run")
def run_command(
    gateway_url: Annotated[
        str | None, typer.Option(help="The node gateway, wss://... Env BCD_GATEWAY_URL, required.")
    ] = None,
    pin: Annotated[
        list[str] | None,
        typer.Option(
            metavar="sha256/<base64>",
            help="SHA-256 SPKI pin of the gateway, repeatable. Env BCD_PINS (comma-separated), default none.",
        ),
    ] = None,
    state_dir: StateDir = None,
    kubelet_socket: Annotated[
        Path | None,
        typer.Option(
            help=f"The kubelet's registration socket. Env BCD_KUBELET_SOCKET, default {DEFAULT_KUBELET_SOCKET}."
        ),
    ] = None,
    resource_name: Annotated[
        str | None, typer.Option(help="Extended resource. Env BCD_RESOURCE_NAME, default nvidia.com/gpu.")
    ] = None,
    insecure_gateway: Annotated[
        bool,
        typer.Option(
            "--insecure-gateway", help="Allow ws:// (development only). Env BCD_INSECURE_GATEWAY=1, default off."
        ),
    ] = False,
) -> None:
    """Stay connected to the gateway and serve the kubelet device plugin."""
    config = _config().override(
        gateway_url=gateway_url,
        pins=pin or None,
        state_dir=state_dir,
        kubelet_socket=kubelet_socket,
        resource_name=resource_name,
        insecure=insecure_gateway or None,
    )
    try:
        daemon = Bcd(config, clock=SystemClock())
        asyncio.run(run_until_signalled(daemon))
    except CredentialRefusedError as exc:
        raise _fail(str(exc), EXIT_CREDENTIAL_REFUSED) from None
    except (
        NotJoinedError,
        GatewayConfigError,
        InventoryError,
        PinMismatchError,
        RuntimeConfigError,
        ValueError,
    ) as exc:
        raise _fail(str(exc)) from None


@app.command("inventory")
def inventory_command() -> None:
    """Print the inventory bcd reports: GPUs (NVML or BCD_SIMULATED_GPUS) and the OS."""
    try:
        inventory = read_inventory(os.environ)
        inventory = with_health(inventory, nvml_module(os.environ, inventory.os.hostname))
    except InventoryError as exc:
        raise _fail(str(exc)) from None
    typer.echo(inventory.model_dump_json(by_alias=True, indent=2))


@app.command("pin")
def pin_command(certificate: Annotated[Path, typer.Argument(help="A PEM or DER certificate file.")]) -> None:
    """Print the sha256/<base64> SPKI pin of a certificate (for the substrate agent's pins)."""
    try:
        data = certificate.read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read {certificate}: {exc.strerror}") from None
    try:
        pin = spki_pin(data)
    except ValueError:
        raise _fail(
            f"{certificate} is not a PEM or DER certificate (a private key, or a CSR?): "
            "give the gateway's certificate, e.g. the tls.crt of its Secret"
        ) from None
    typer.echo(pin)


async def run_until_signalled(daemon: Bcd) -> None:
    """`daemon.run()` until SIGTERM or SIGINT, which close the gateway session normally and return."""
    loop = asyncio.get_running_loop()
    running = asyncio.create_task(daemon.run(), name="bcd:run")
    received: list[str] = []

    def stop(signum: signal.Signals) -> None:
        if not received:
            received.append(signum.name)
            log.info("%s received: closing the gateway session", signum.name)
            running.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await running
    except asyncio.CancelledError:
        if not received:
            raise
        log.info("gateway session closed (1000, normal closure); bcd stopped on %s", received[0])
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def main() -> None:
    app()
