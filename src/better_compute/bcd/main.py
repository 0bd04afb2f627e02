"""The `bcd` command: join, run, inventory, pin. docs/bcd.md documents flags, environment and failures."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from better_compute.bcd.agent import CredentialRefusedError, GatewayConfigError
from better_compute.bcd.config import BcdConfig
from better_compute.bcd.daemon import Bcd, NotJoinedError
from better_compute.bcd.inventory import InventoryError, read_inventory
from better_compute.bcd.join import JoinError, join
from better_compute.bcd.pins import PinMismatchError, spki_pin
from better_compute.core.clock import SystemClock
from better_compute.core.redaction import install_redaction

__all__ = ["app", "main"]

app = typer.Typer(name="bcd", help="better-compute node daemon.", no_args_is_help=True, add_completion=False)

EXIT_CREDENTIAL_REFUSED = 3

StateDir = Annotated[Path | None, typer.Option(help="Where the node credential is kept [env BCD_STATE_DIR].")]


def _config() -> BcdConfig:
    return BcdConfig.from_env(os.environ)


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"bcd: error: {message}", err=True)
    return typer.Exit(code)


@app.callback()
def _setup(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install_redaction()


@app.command("join")
def join_command(
    control_plane_url: Annotated[
        str | None, typer.Option(help="The control plane's base URL [env BCD_CONTROL_PLANE_URL].")
    ] = None,
    token_file: Annotated[Path | None, typer.Option(help="The mounted join token [env BCD_JOIN_TOKEN_FILE].")] = None,
    state_dir: StateDir = None,
) -> None:
    """Redeem the join token once and keep the node credential (a joined node needs no token)."""
    config = _config().override(control_plane_url=control_plane_url, token_file=token_file, state_dir=state_dir)
    try:
        inventory = read_inventory(os.environ)
        credential = asyncio.run(join(config, inventory, clock=SystemClock()))
    except (JoinError, InventoryError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"joined: node {credential.node_id} of pool {credential.pool_id}")


@app.command("run")
def run_command(
    gateway_url: Annotated[str | None, typer.Option(help="The node gateway, wss:// [env BCD_GATEWAY_URL].")] = None,
    pin: Annotated[
        list[str] | None, typer.Option(help="SHA-256 SPKI pin of the gateway, repeatable [env BCD_PINS].")
    ] = None,
    state_dir: StateDir = None,
    kubelet_socket: Annotated[
        Path | None, typer.Option(help="The kubelet's registration socket [env BCD_KUBELET_SOCKET].")
    ] = None,
    resource_name: Annotated[str | None, typer.Option(help="Extended resource [env BCD_RESOURCE_NAME].")] = None,
    insecure_gateway: Annotated[
        bool | None, typer.Option(help="Allow ws:// (development only) [env BCD_INSECURE_GATEWAY].")
    ] = None,
) -> None:
    """Stay connected to the gateway and serve the kubelet device plugin."""
    config = _config().override(
        gateway_url=gateway_url,
        pins=pin or None,
        state_dir=state_dir,
        kubelet_socket=kubelet_socket,
        resource_name=resource_name,
        insecure=insecure_gateway,
    )
    try:
        daemon = Bcd(config, clock=SystemClock())
        asyncio.run(daemon.run())
    except CredentialRefusedError as exc:
        raise _fail(str(exc), EXIT_CREDENTIAL_REFUSED) from None
    except (NotJoinedError, GatewayConfigError, InventoryError, PinMismatchError, ValueError) as exc:
        raise _fail(str(exc)) from None


@app.command("inventory")
def inventory_command() -> None:
    """Print the inventory bcd reports: GPUs (NVML or BCD_SIMULATED_GPUS) and the OS."""
    try:
        inventory = read_inventory(os.environ)
    except InventoryError as exc:
        raise _fail(str(exc)) from None
    typer.echo(inventory.model_dump_json(by_alias=True, indent=2))


@app.command("pin")
def pin_command(certificate: Annotated[Path, typer.Argument(help="A PEM or DER certificate file.")]) -> None:
    """Print the sha256/<base64> SPKI pin of a certificate (for the substrate agent's pins)."""
    typer.echo(spki_pin(certificate.read_bytes()))


def main() -> None:
    app()
