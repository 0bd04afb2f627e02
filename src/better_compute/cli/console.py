"""The CLI's two consoles: output on stdout, errors and prompts on stderr.

On a terminal rich fits its output to the window. Piped into a file or a CI log
there is no window: rich would wrap at 80 columns, breaking long lines (references,
URLs, JSON) in the middle, so there the width is unbounded unless COLUMNS says one.
"""

from __future__ import annotations

import os

from rich.console import Console, ConsoleDimensions

__all__ = ["UNWRAPPED_WIDTH", "err", "out"]

UNWRAPPED_WIDTH = 100_000


class _Console(Console):
    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, highlight=False)
        # rich fixes COLUMNS at construction (import time); it is read at each use instead,
        # so that a COLUMNS set or cleared later (a test, an embedding program) is honoured
        self._width = None

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and not os.environ.get("COLUMNS"):
            return ConsoleDimensions(UNWRAPPED_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


out: Console = _Console()
err: Console = _Console(stderr=True)
