"""The one question the CLI asks: [y/N] on stderr, Ctrl-C exits 130 and a closed stdin is an error."""

from __future__ import annotations

import signal
import threading

import typer

from better_compute.cli.console import err
from better_compute.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED

__all__ = ["confirm"]


def confirm(question: str) -> bool:
    """True for y/yes; Ctrl-C exits 130 and end of input exits 1, each with one line saying nothing changed."""
    # asyncio.run's own SIGINT handler would only cancel the (blocked) task: Ctrl-C must interrupt the read.
    # Only the main thread takes signals (and may set their handlers): a command run in another thread, as
    # an embedding program or a test runs it, reads the answer as it is.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        err.print(f"{question} [y/N]: ", end="", markup=False)
        answer = input()
    except KeyboardInterrupt:
        err.print("\ninterrupted: nothing was changed.", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except EOFError:
        err.print("\nerror: no answer (stdin is closed): pass --yes to go ahead without asking", markup=False)
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    return answer.strip().lower() in ("y", "yes")
