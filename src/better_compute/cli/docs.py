"""`better-compute docs cli|api|fleet` (hidden): docs/cli.md, docs/api.md and docs/fleet-reference.md, from the code.

The command tree and the OpenAPI document are the source; a test regenerates both
files and compares, so the docs cannot drift:

    better-compute docs cli > docs/cli.md
    better-compute docs api > docs/api.md
    better-compute docs fleet > docs/fleet-reference.md
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any

import typer
from typer._click.core import Command, Context
from typer.core import TyperGroup

from better_compute.api import create_app
from better_compute.api.errors import UNAVAILABLE_DOC
from better_compute.cli.console import out
from better_compute.cli.context import ENVIRONMENT
from better_compute.cli.errors import __doc__ as EXIT_STATUS_DOC
from better_compute.fleet import fleet_module
from better_compute.fleet.reference import reference_markdown
from better_compute.kubernetes import kubernetes
from better_compute.ops.idempotency import HEADER, MAX_KEY_LENGTH, RETENTION
from better_compute.server import better_compute
from better_compute.vps import vps

__all__ = ["api_markdown", "cli_markdown", "docs_app"]

docs_app = typer.Typer(no_args_is_help=True, help="Generate docs/cli.md, docs/api.md and docs/fleet-reference.md.")

_METHODS = ("get", "post", "put", "patch", "delete")


def cli_markdown(root: Command) -> str:
    """Every visible command of the tree: usage, help, options."""
    lines = [
        "# The `better-compute` command line",
        "",
        "Generated from the code by `better-compute docs cli > docs/cli.md`; a test checks it is current.",
        "",
        "## Exit status",
        "",
        "```",
        *_exit_status(),
        "```",
        "",
        "## Environment",
        "",
        "| variable | meaning and default |",
        "|---|---|",
        *(f"| `{name}` | {meaning} |" for name, meaning in ENVIRONMENT),
        "",
        "## Global options",
        "",
        *_options(root, "better-compute"),
        "",
        "## Commands",
        "",
    ]
    for path, command in _walk(root, "better-compute"):
        lines.extend(_command_section(path, command))
    return "\n".join(lines).rstrip() + "\n"


def _exit_status() -> list[str]:
    text = (EXIT_STATUS_DOC or "").split("Exit status of every command (docs/cli.md):", 1)[-1]
    return [line[4:] if line.startswith("    ") else line for line in text.strip("\n").splitlines()]


def _walk(command: Command, path: str) -> list[tuple[str, Command]]:
    if isinstance(command, TyperGroup):
        found: list[tuple[str, Command]] = []
        ctx = Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                found.extend(_walk(sub, f"{path} {name}"))
        return found
    return [(path, command)]


def _command_section(path: str, command: Command) -> list[str]:
    ctx = Context(command, info_name=path)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"### `{path}`", "", f"    {path} {usage}".rstrip(), "", (command.help or "").strip(), ""]
    lines.extend(_options(command, path))
    lines.append("")
    return lines


def _options(command: Command, path: str) -> list[str]:
    ctx = Context(command, info_name=path)
    records = [p.get_help_record(ctx) for p in command.get_params(ctx)]
    return [f"- `{record[0]}`: {record[1]}" for record in records if record is not None]


def api_markdown(schema: dict[str, Any]) -> str:
    """Every route of the OpenAPI document: method, path, summary and the statuses it answers."""
    lines = [
        "# The HTTP API",
        "",
        "Generated from the code by `better-compute docs api > docs/api.md`; a test checks it is current.",
        "The OpenAPI document is served at `/openapi.json` and rendered at `/docs` (both without a key).",
        "Every `/v1` route except the node gateway's needs `Authorization: Bearer <api key>`.",
        'Every error answers `{"error": {"code": ..., "message": ..., "path": ..., "problems": [...]}}`.',
        "",
        "| method | path | what | answers |",
        "|---|---|---|---|",
    ]
    for path, item in sorted(schema["paths"].items()):
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            summary = (operation.get("description") or operation.get("summary") or "").strip().splitlines()
            statuses = ", ".join(sorted(operation.get("responses", {})))
            what = (summary[0] if summary else "").replace("|", "\\|")
            lines.append(f"| {method.upper()} | `{path}` | {what} | {statuses} |")
    lines += ["", UNAVAILABLE_DOC, "", *_idempotency_section(schema)]
    return "\n".join(lines) + "\n"


def _idempotency_section(schema: dict[str, Any]) -> list[str]:
    """The routes that take an Idempotency-Key header (from the OpenAPI document) and what it does."""
    routes = [
        f"`{method.upper()} {path}`"
        for path, item in sorted(schema["paths"].items())
        for method in _METHODS
        if any(p.get("name") == HEADER and p.get("in") == "header" for p in item.get(method, {}).get("parameters", []))
    ]
    hours = f"{RETENTION.total_seconds() / 3600:.0f} h"
    return [
        f"## {HEADER}",
        "",
        f"Taken by {', '.join(routes)}: a key of the caller's own, 1 to {MAX_KEY_LENGTH} visible",
        "ASCII characters (a UUID is a good one), scoped to the tenant and the operation. The first request",
        "with a key records it and the id its object will have, then makes the object under that id; a request",
        f"with the same key and the same body within {hours} (on the server's clock) answers that object, made by",
        "whichever request got there first, and makes nothing more; this holds across replicas on PostgreSQL",
        f"(the key's record has a primary key of its own). The same key with another body within {hours} is",
        f"409 CONFLICT at `/headers/{HEADER}` (`reason: idempotency-key-reused`); a key that is not visible ASCII",
        f"is 400 INVALID_INPUT at the same path. After {hours} a key is free again. A body the route refuses",
        "(400) records nothing, so the key may be sent again with the body corrected.",
        "",
        "So a client that did not see its answer (the connection dropped, a 503 after the database had",
        "committed, a cancelled call) retries with the same key and gets the object that was made, never a",
        "second one. `better-compute reservations create`, `api-keys create` and `secrets create` send a new key",
        "for each command they run, or the one given with `--idempotency-key`, so running a command again with",
        "the same key is just as safe.",
        "",
        "What the server keeps of a key. The record is found by an HKDF-SHA256 hash of the key (bound to the",
        "tenant and the operation), never by the key; the request's hash is an HMAC under another key derived",
        "from it, so a secret's value cannot be guessed at from its record. `POST /v1/api-keys` answers a value",
        "shown once, which the server keeps only as a SHA-256: its retry gets the same value because the first",
        "answer's value is kept sealed (AES-256-GCM) under a third key derived from the client's key, for",
        f"{hours}, then purged. Neither the database nor the server's own secrets open it; only a request with",
        "the same key, as the same tenant. Such a key is then as secret as the answer for that time: make it",
        "random (a UUID4), send it only over TLS, and never log it. The value is not derived from the key, or",
        "whoever once saw the key would hold the API key for as long as it lives.",
        "",
        "The other POST routes need no key, because a retry of them makes nothing twice:",
        "",
        "- `POST /v1/fleet/apply` is declarative: pools (and everything else) are named in the document, a pool",
        "  name is unique in its tenant, and an apply retried after it committed finds its objects made and",
        "  changes nothing more (a saved plan applied again is refused as stale: plan again, and it is empty).",
        "- Join tokens are made by a pool's substrate, in its own transaction, never by a route: their value",
        "  goes to the join Secret on the cluster and is never answered to a client.",
        "- `POST /v1/gateway/join`: a Node whose identity was proven and that joins again after its answer was",
        "  lost takes no further use of its token (docs/bcd.md).",
        "- `POST .../release`, `.../revoke`, `.../archive`, `/v1/secrets/reseal` and",
        "  `/v1/kubernetes/clusters/{cluster_id}/upgrade` (to a version) are harmless to repeat;",
        "  `/v1/fleet/plan` changes nothing; `/v1/kubernetes/clusters/{cluster_id}/credentials` keeps nothing: each",
        "  call answers a fresh 600 s credential, and a lost one expires unused.",
    ]


def standard_openapi() -> dict[str, Any]:
    """The OpenAPI document of the standard control plane (vps, kubernetes, fleet, gateway), built without a database."""
    with tempfile.TemporaryDirectory(prefix="better-compute-docs-") as tmp:
        compute = better_compute(
            database=f"sqlite:///{Path(tmp) / 'docs.db'}",
            secret=secrets.token_urlsafe(32),
            modules=[vps(), kubernetes(), fleet_module()],
        )
        schema: dict[str, Any] = create_app(compute).openapi()
        return schema


@docs_app.command("cli")
def cli() -> None:
    """Print docs/cli.md."""
    from better_compute.cli.main import app

    out.print(cli_markdown(typer.main.get_command(app)), markup=False, soft_wrap=True, end="")


@docs_app.command("api")
def api() -> None:
    """Print docs/api.md."""
    out.print(api_markdown(standard_openapi()), markup=False, soft_wrap=True, end="")


@docs_app.command("fleet")
def fleet() -> None:
    """Print docs/fleet-reference.md."""
    out.print(reference_markdown(), markup=False, soft_wrap=True, end="")
